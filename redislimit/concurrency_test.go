package redislimit_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestConcurrencySuite runs the concurrency suite, every case of it, on
// redislimit.Concurrency, on a clock the test steps (the script takes the
// time from it, WithScriptClock), so the cases of the longest hold run too.
// The hold expiry is the longest hold when there is one: a renewal then
// cannot outlive it, whenever the renewer's ticks land.
func TestConcurrencySuite(t *testing.T) {
	runConcurrencySuite(t, shared.client(t))
}

// runConcurrencySuite runs the suite on limiters on c (one server, or a
// cluster).
func runConcurrencySuite(t *testing.T, c redis.UniversalClient) {
	mock := newMock()
	limitertest.Run(t, limitertest.Harness{
		Concurrency: func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error) {
			opts := []redislimit.Option{redislimit.WithPrefix(testKey(t, "conc") + ":"), redislimit.WithTimeout(patient),
				keylimit.WithClock(mock), redislimit.WithScriptClock(mock), keylimit.WithMaxHold(maxHold)}
			if maxHold > 0 {
				opts = append(opts, redislimit.WithHoldExpiry(maxHold))
			}
			lim, err := redislimit.NewConcurrency(c, "test", n, opts...)
			if err != nil {
				return nil, err
			}
			return lim, nil
		},
		Advance:  mock.Add,
		Attempts: 2_000,
	})
}

// newConcurrencyFleet returns instances Concurrency limiters of n slots,
// each on a client of its own, sharing one prefix, closed when the test
// ends.
func newConcurrencyFleet(t *testing.T, newClient func(testing.TB) redis.UniversalClient, instances, n int,
	opts ...redislimit.Option) []*redislimit.Concurrency {
	prefix := testKey(t, "fleet") + ":"
	fleet := make([]*redislimit.Concurrency, instances)
	for i := range fleet {
		lim, err := redislimit.NewConcurrency(newClient(t), "test", n,
			append([]redislimit.Option{redislimit.WithPrefix(prefix), redislimit.WithTimeout(patient)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { lim.Close() })
		fleet[i] = lim
	}
	return fleet
}

// hammerConcurrency has goroutines acquire (trying, waiting, waiting until
// a deadline) slots of key on the instances of fleet in turn, hold them a
// random while and release them, for about d or per acquisitions each,
// whichever ends first; the slots held are counted exactly, with base more
// held elsewhere, and must never exceed n. It returns the acquisitions
// made and the most slots the goroutines held at once.
func hammerConcurrency(t *testing.T, fleet []*redislimit.Concurrency, key string, n, base int64, goroutines, per int,
	d time.Duration) (int64, int64) {
	var inFlight, peak, over, acquisitions atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for g := range goroutines {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 27))
			lim := fleet[g%len(fleet)]
			for i := 0; i < per && time.Now().Before(deadline); i++ {
				want := 1 + rnd.IntN(2)
				var p keylimit.Permit
				ok := false
				switch rnd.IntN(3) {
				case 0:
					var r keylimit.Result
					p, r = lim.TryAcquire(key, want)
					ok = r.Allowed
				case 1:
					var err error
					p, err = lim.Acquire(context.Background(), key, want)
					ok = err == nil
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.IntN(20))*time.Millisecond)
					var err error
					p, err = lim.Acquire(ctx, key, want)
					cancel()
					ok = err == nil
				}
				if !ok {
					continue
				}
				acquisitions.Add(1)
				cur := inFlight.Add(int64(want))
				if cur+base > n {
					over.Add(1)
				}
				for {
					old := peak.Load()
					if cur <= old || peak.CompareAndSwap(old, cur) {
						break
					}
				}
				time.Sleep(time.Duration(rnd.IntN(2000)) * time.Microsecond)
				// Counted out before the release, so the count is never
				// below the slots Redis holds.
				inFlight.Add(-int64(want))
				p.Release()
				if rnd.IntN(8) == 0 {
					p.Release() // a second release frees nothing
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, over.Load(), "acquisitions that took the key above its limit of %d (%d held elsewhere)", n, base)
	require.Positive(t, acquisitions.Load(), "no acquisition succeeded")
	return acquisitions.Load(), peak.Load()
}

// TestConcurrencyFleetNeverAboveN: 48 goroutines on 3 instances, each with
// its own client, hammer one key of 5 slots: the slots held, counted
// exactly, are never above 5; once all are done, every instance sees the 5
// free and nobody waiting.
func TestConcurrencyFleetNeverAboveN(t *testing.T) {
	const n = 5
	fleet := newConcurrencyFleet(t, func(t testing.TB) redis.UniversalClient { return shared.client(t) }, 3, n)
	key := testKey(t, "hot")
	acquired, peak := hammerConcurrency(t, fleet, key, n, 0, 48, 40, time.Minute)
	t.Logf("%d acquisitions, at most %d slots held at once", acquired, peak)
	require.LessOrEqual(t, peak, int64(n))
	for i, lim := range fleet {
		require.Equal(t, n, lim.Peek(key).Remaining, "instance %d: Peek().Remaining once all released", i)
		require.Zero(t, lim.Stats().Waiting, "instance %d: Stats().Waiting", i)
	}
}

// TestConcurrencyFleetSharesHolds: holds of one instance count on another;
// a release on one frees the slot for all; another instance's Release of a
// hold that expired frees nothing; keys are independent.
func TestConcurrencyFleetSharesHolds(t *testing.T) {
	fleet := newConcurrencyFleet(t, func(t testing.TB) redis.UniversalClient { return shared.client(t) }, 2, 2,
		// Holds of 500 ms, not shorter: a hold that expired while the
		// machine stalled between two calls below would be reclaimed too
		// (seen once under load with 50 ms).
		redislimit.WithHoldExpiry(500*time.Millisecond), keylimit.WithMaxHold(500*time.Millisecond))
	a, b := fleet[0], fleet[1]
	key := testKey(t, "k")
	p, r := a.TryAcquire(key, 2)
	require.True(t, r.Allowed)
	_, r = b.TryAcquire(key, 1)
	require.False(t, r.Allowed, "instance b acquired a slot instance a holds")
	other, r := b.TryAcquire(testKey(t, "other"), 2)
	require.True(t, r.Allowed, "another key is not held")
	// Released, so that only q's slots are reclaimed below: left to
	// expire, other's were too, whenever a renewal or a call met them
	// first (4 reclaimed, once, on a busy machine).
	other.Release()
	p.Release()
	q, r := b.TryAcquire(key, 2)
	require.True(t, r.Allowed, "instance b, once a released")
	// q is never released: its hold ends at the longest hold, on Redis time.
	_ = q
	require.Eventually(t, func() bool { return a.Peek(key).Remaining == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(2), a.Stats().Reclaimed+b.Stats().Reclaimed, "slots reclaimed across the fleet")
	held, r := a.TryAcquire(key, 2)
	require.True(t, r.Allowed)
	q.Release() // expired: frees nothing of a's
	_, r = b.TryAcquire(key, 1)
	require.False(t, r.Allowed, "a late Release of an expired hold freed a's slots")
	held.Release()
}

// The helper process of TestConcurrencyKilledInstance: TestMain runs it
// instead of the tests when concHelperEnv is set.
const concHelperEnv = "REDISLIMIT_CONCURRENCY_HELPER"

// concurrencyHelper acquires the slots its environment says and holds them,
// renewing, until it is killed; it prints "held" once it holds them all.
func concurrencyHelper() int {
	n, _ := strconv.Atoi(os.Getenv("CONC_N"))
	holds, _ := strconv.Atoi(os.Getenv("CONC_HOLDS"))
	expiry, _ := time.ParseDuration(os.Getenv("CONC_EXPIRY"))
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(concHelperEnv), ContextTimeoutEnabled: true})
	lim, err := redislimit.NewConcurrency(client, "test", n, redislimit.WithPrefix(os.Getenv("CONC_PREFIX")),
		redislimit.WithHoldExpiry(expiry), redislimit.WithTimeout(patient))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for range holds {
		if _, r := lim.TryAcquire(os.Getenv("CONC_KEY"), 1); !r.Allowed {
			fmt.Println("refused")
			return 1
		}
	}
	fmt.Println("held")
	time.Sleep(time.Hour)
	return 0
}

// TestConcurrencyKilledInstance: of 3 instances, one (a process of its own,
// this test binary in helper mode) holds 2 of a key's 5 slots; while all
// live, the other two, hammered for 2 hold expiries, never take more than
// the 3 left (the helper's holds live on by renewal); then the helper is
// killed with SIGKILL, and its slots are back within the hold expiry of
// its death, on Redis time.
func TestConcurrencyKilledInstance(t *testing.T) {
	// An expiry of a second: the helper's renewals must land within half of
	// it even on a loaded machine, or it loses its holds as a paused
	// instance does.
	const n, helperHolds, expiry = 5, 2, time.Second
	fleet := newConcurrencyFleet(t, func(t testing.TB) redis.UniversalClient { return shared.client(t) }, 2, n,
		redislimit.WithHoldExpiry(expiry))
	key := testKey(t, "k")
	prefix := fleet[0].StateKey(key)[:len(fleet[0].StateKey(key))-len("{"+key+"}")]

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), concHelperEnv+"="+redisAddr, "CONC_N="+strconv.Itoa(n),
		"CONC_HOLDS="+strconv.Itoa(helperHolds), "CONC_EXPIRY="+expiry.String(), "CONC_PREFIX="+prefix, "CONC_KEY="+key)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
	}()
	select {
	case l := <-line:
		require.Equal(t, "held", l, "the helper process")
	case <-time.After(30 * time.Second):
		t.Fatal("the helper process did not say it held its slots")
	}

	acquired, peak := hammerConcurrency(t, fleet, key, n, helperHolds, 16, 1_000_000, 2*expiry)
	t.Logf("while the helper lived: %d acquisitions, at most %d slots held at once by the two others", acquired, peak)
	require.LessOrEqual(t, peak, int64(n-helperHolds))
	require.Equal(t, n-helperHolds, fleet[0].Peek(key).Remaining, "the helper's holds after 2 hold expiries")

	c := shared.client(t)
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	killed := redisTime(t, c)
	// Every hold of the key is the helper's now: the latest expires within
	// the expiry of the kill, on Redis time.
	last, err := c.ZRangeWithScores(context.Background(), fleet[0].StateKey(key), -1, -1).Result()
	require.NoError(t, err)
	require.Len(t, last, 1)
	until := time.Duration(int64(last[0].Score)*1000 - killed)
	t.Logf("the dead instance's last hold expires %v after the kill", until)
	require.LessOrEqual(t, until, expiry, "the dead instance's holds outlive the kill by more than the hold expiry")
	require.Eventually(t, func() bool { return fleet[0].Peek(key).Remaining == n }, 10*time.Second, 5*time.Millisecond,
		"the dead instance's slots never came back")
	require.Equal(t, uint64(helperHolds), fleet[0].Stats().Reclaimed+fleet[1].Stats().Reclaimed, "slots reclaimed")
	_, r := fleet[1].TryAcquire(key, n)
	require.True(t, r.Allowed, "all %d slots, once the dead instance's expired", n)
}

// concurrencyOnCluster runs the concurrency suite on a cluster client; 3
// instances with their own cluster clients hammer one key, never above N;
// and keys the hash tag cannot hold ('}' first, empty, every byte) work,
// each call on one node (a script's two keys share a slot, or the call
// fails with CROSSSLOT).
func concurrencyOnCluster(t *testing.T, cl *redisserver.Cluster, c *redis.ClusterClient) {
	t.Run("Suite", func(t *testing.T) { runConcurrencySuite(t, c) })
	t.Run("Fleet", func(t *testing.T) {
		const n = 4
		fleet := newConcurrencyFleet(t, func(t testing.TB) redis.UniversalClient { return clusterClient(t, cl) }, 3, n)
		key := testKey(t, "hot")
		acquired, peak := hammerConcurrency(t, fleet, key, n, 0, 24, 30, time.Minute)
		t.Logf("%d acquisitions on the cluster, at most %d slots held at once", acquired, peak)
		require.LessOrEqual(t, peak, int64(n))
		require.Equal(t, n, fleet[1].Peek(key).Remaining)
	})
	t.Run("AnyKey", func(t *testing.T) {
		var errs errorLog
		lim, err := redislimit.NewConcurrency(c, "test", 2, redislimit.WithPrefix(testKey(t, "p")+":"),
			redislimit.WithTimeout(patient), redislimit.WithOnError(errs.add), redislimit.WithFailurePolicy(redislimit.FailClosed()))
		require.NoError(t, err)
		defer lim.Close()
		keys := []string{"}", "}x", "}}{{", "", "{", "{}", "a}b", "{a}", strings.Repeat("}", 300)}
		for b := range 256 {
			keys = append(keys, string([]byte{byte(b)}), "k"+string([]byte{byte(b)})+"}")
		}
		for _, k := range keys {
			p, r := lim.TryAcquire(k, 2)
			require.True(t, r.Allowed, "key %q", k)
			_, r = lim.TryAcquire(k, 1)
			require.False(t, r.Allowed, "key %q: a third slot of 2", k)
			p.Release()
			require.Equal(t, 2, lim.Peek(k).Remaining, "key %q after the release", k)
		}
		require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
	})
}

// TestConcurrencyFailurePolicy: while Redis is unreachable, FailOpen admits
// every acquisition (with a Permit that holds nothing), FailClosed none,
// and FailLocal(2) a share of 5/2 = 2 slots in process, with Permits that
// give them back; each call's error is a *Error passed to WithOnError.
func TestConcurrencyFailurePolicy(t *testing.T) {
	for _, tt := range []struct {
		name     string
		policy   redislimit.FailurePolicy
		admitted int
	}{{"FailOpen", redislimit.FailOpen(), 10}, {"FailClosed", redislimit.FailClosed(), 0}, {"FailLocal(2)", redislimit.FailLocal(2), 2}} {
		t.Run(tt.name, func(t *testing.T) {
			var errs errorLog
			lim, err := redislimit.NewConcurrency(deadClient(t), "test", 5, redislimit.WithFailurePolicy(tt.policy),
				redislimit.WithOnError(errs.add), redislimit.WithFailureBackoff(time.Hour))
			require.NoError(t, err)
			defer lim.Close()
			var held []keylimit.Permit
			for range 10 {
				if p, r := lim.TryAcquire("k", 1); r.Allowed {
					held = append(held, p)
				}
			}
			require.Len(t, held, tt.admitted, "acquisitions admitted of 10")
			_, _, err = lim.TryAcquireContext(context.Background(), "k", 1)
			var rerr *redislimit.Error
			require.ErrorAs(t, err, &rerr)
			require.Equal(t, "acquire", rerr.Op)
			require.Equal(t, 1, errs.len(), "errors seen by WithOnError: the first call's; the backoff asks Redis no more")
			for _, p := range held {
				p.Release()
			}
			fallbacks := uint64(11)
			if tt.admitted == 2 {
				_, r := lim.TryAcquire("k", 2)
				require.True(t, r.Allowed, "the fallback's 2 slots, once released")
				fallbacks++
			}
			require.Equal(t, fallbacks, lim.Stats().Fallbacks)
		})
	}
}

// TestConcurrencyAbandonedAcquire: an Acquire whose context ends while it
// waits holds nothing, in Redis too: the slot it waited for goes to the
// next. And an acquisition whose caller's deadline passed during the call
// is released by its id, never left to wedge the key.
func TestConcurrencyAbandonedAcquire(t *testing.T) {
	lim, err := redislimit.NewConcurrency(shared.client(t), "test", 1, redislimit.WithPrefix(testKey(t, "p")+":"),
		redislimit.WithTimeout(patient))
	require.NoError(t, err)
	defer lim.Close()
	key := testKey(t, "k")
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Microsecond)
		p, err := lim.Acquire(ctx, key, 1)
		cancel()
		if err == nil {
			p.Release()
		}
	}
	require.Equal(t, 1, lim.Peek(key).Remaining, "a slot left held by abandoned acquisitions")
	require.Zero(t, lim.Stats().Waiting)
}

// TestConcurrencyOptions: the options a Concurrency refuses, and those the
// rate limiters refuse.
func TestConcurrencyOptions(t *testing.T) {
	c := shared.client(t)
	for _, opt := range []redislimit.Option{redislimit.WithLeases(time.Second),
		redislimit.WithHoldExpiry(time.Microsecond), keylimit.WithMaxHold(time.Microsecond), keylimit.WithMaxHold(-time.Second)} {
		lim, err := redislimit.NewConcurrency(c, "test", 3, opt)
		require.Error(t, err)
		require.Nil(t, lim)
	}
	_, err := redislimit.NewConcurrency(c, "test", keylimit.MaxConcurrency+1)
	require.ErrorContains(t, err, "MaxConcurrency")
	for _, opt := range []redislimit.Option{redislimit.WithHoldExpiry(time.Second), keylimit.WithMaxHold(time.Second)} {
		_, err := redislimit.NewTokenBucket(c, "test", keylimit.PerSecond(1), opt)
		require.ErrorContains(t, err, "a rate limiter holds nothing")
		inner, err := keylimit.NewFixedWindow[string](keylimit.PerSecond(1))
		require.NoError(t, err)
		_, err = redislimit.NewPenalty(c, "test", inner, keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Minute}, opt)
		require.ErrorContains(t, err, "a Penalty holds nothing")
	}
	lim, err := redislimit.NewConcurrency(c, "test", 3)
	require.NoError(t, err)
	defer lim.Close()
	require.Equal(t, "keylimit:test:concurrency:{k}", lim.StateKey("k"))
	require.Error(t, lim.SetLimit(0))
	require.Equal(t, 3, lim.Stats().Limit)
	require.NoError(t, lim.Ping(context.Background()))
}

// TestConcurrencyPausedInstance: an instance whose renewals stop (its local
// clock, which drives them, stands still: as in a pause) loses its hold
// when the hold expires on Redis time; another instance then takes the
// slot, so both hold it: the key runs above N, as the type's doc says. The
// first renewal after the pause finds the hold gone and logs it, and the
// paused holder's Release then frees nothing of the other's.
func TestConcurrencyPausedInstance(t *testing.T) {
	const expiry = 50 * time.Millisecond
	rec, logger := newLogRecorder(slog.LevelInfo)
	mock := newMock()
	prefix := testKey(t, "p") + ":"
	paused, err := redislimit.NewConcurrency(shared.client(t), "test", 1, redislimit.WithPrefix(prefix),
		redislimit.WithTimeout(patient), redislimit.WithHoldExpiry(expiry), keylimit.WithClock(mock), keylimit.WithLogger(logger))
	require.NoError(t, err)
	defer paused.Close()
	other := newConcurrencyFleet(t, func(t testing.TB) redis.UniversalClient { return shared.client(t) }, 1, 1,
		redislimit.WithPrefix(prefix), redislimit.WithHoldExpiry(expiry))[0]
	key := testKey(t, "k")
	p, r := paused.TryAcquire(key, 1)
	require.True(t, r.Allowed)
	_, r = other.TryAcquire(key, 1)
	require.False(t, r.Allowed, "the other instance, while the hold is live")
	var q keylimit.Permit
	require.Eventually(t, func() bool {
		q, r = other.TryAcquire(key, 1)
		return r.Allowed
	}, 10*time.Second, 5*time.Millisecond, "the other instance, once the unrenewed hold expired")
	mock.Add(expiry) // the pause ends: the renewer ticks
	lines := rec.waitLogged(t, "redislimit: holds expired before their renewal (the instance was paused, or Redis out of reach, "+
		"for longer than half the hold expiry): their keys may run above the limit until they are released")
	require.Len(t, lines, 1)
	p.Release()
	_, r = paused.TryAcquire(key, 1)
	require.False(t, r.Allowed, "the paused holder's late Release freed the other's slot")
	q.Release()
	require.Equal(t, 1, paused.Peek(key).Remaining)
}

// BenchmarkConcurrency measures TryAcquire and Release on one key, serial
// and parallel: two script calls an iteration, against the shared
// redis-server on loopback.
func BenchmarkConcurrency(b *testing.B) {
	lim, err := redislimit.NewConcurrency(shared.client(b), "bench", keylimit.MaxConcurrency, redislimit.WithPrefix(testKey(b, "p")+":"),
		redislimit.WithTimeout(patient))
	require.NoError(b, err)
	defer lim.Close()
	key := testKey(b, "k")
	b.Run("acquire+release/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, r := lim.TryAcquire(key, 1)
			if !r.Allowed {
				b.Fatal("refused")
			}
			p.Release()
		}
	})
	b.Run("acquire+release/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, r := lim.TryAcquire(key, 1)
				if !r.Allowed {
					panic("refused")
				}
				p.Release()
			}
		})
	})
}

// TestConcurrencyLostReleaseRetried pins issue 37, item 3: releases that
// fail while Redis sleeps (DEBUG SLEEP 0.3), and the clean-up of an
// acquisition that timed out meanwhile, were left to the hold expiry. The
// acquisition's reply is lost, but Redis runs it when it wakes: it holds
// the fifth slot for no one. The renewer retries them all at its next
// tick: the 5 slots are free again one renewal period after Redis answers
// (a second try at the next, if a slow machine timed out the first), not
// after the hold expiry (an hour, on Redis time, which the test's mock
// clock does not move).
func TestConcurrencyLostReleaseRetried(t *testing.T) {
	const expiry = time.Hour
	ctx := context.Background()
	s := serverWith(t, "--enable-debug-command", "local")
	ctl := s.client(t)
	mock := newMock()
	lim, err := redislimit.NewConcurrency(s.client(t), "test", 5, redislimit.WithHoldExpiry(expiry), keylimit.WithClock(mock),
		redislimit.WithFailurePolicy(redislimit.FailClosed()))
	require.NoError(t, err)
	defer lim.Close()
	const key = "k"
	held := func() int64 {
		n, err := ctl.ZCard(ctx, lim.StateKey(key)).Result()
		require.NoError(t, err)
		return n
	}
	var permits []keylimit.Permit
	for range 4 {
		p, r := lim.TryAcquire(key, 1)
		require.True(t, r.Allowed)
		permits = append(permits, p)
	}
	// CLIENT PAUSE is in force once its answer is back: every call below
	// waits until it ends, or times out, and Redis runs it then. (A DEBUG
	// SLEEP sent on a connection of its own gave no such order: under load
	// the acquisition could reach Redis first.)
	require.NoError(t, ctl.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err())
	// The acquisition of the fifth slot times out (DefaultTimeout, 100 ms),
	// which starts the failure backoff; Redis runs it when the pause ends.
	_, r, err := lim.TryAcquireContext(ctx, key, 1)
	require.False(t, r.Allowed)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, p := range permits {
		p.Release() // within the backoff: Redis is not asked
	}
	// A call on ctl waits for the pause to end. The 4 released slots are
	// still held on Redis; the acquisition that timed out is too if Redis
	// ran it (it does not when go-redis closed its connection first).
	require.NoError(t, ctl.Ping(ctx).Err())
	require.Contains(t, []int64{4, 5}, held(), "slots held once the pause ended")
	for tick := 1; ; tick++ {
		mock.Add(expiry / 2) // a renewal period: the renewer ticks
		if waitFor(func() bool { return held() == 0 }, 5*time.Second) {
			break
		}
		require.Less(t, tick, 2, "slots still held after %d renewal periods, with Redis answering", tick)
	}
	p, r := lim.TryAcquire(key, 5)
	require.True(t, r.Allowed, "the 5 slots, once the releases were retried")
	p.Release()
	require.Zero(t, held())
}

// waitFor reports whether cond holds within d, polling it.
func waitFor(cond func() bool, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestConcurrencyPendingReleasesBounded: PendingReleasesMax+1 releases that
// fail at once, from as many goroutines, wait for Redis; the oldest is
// pushed out (left to its hold expiry), the others are made at the
// renewer's next tick, which logs the one given up: exactly 1 slot stays
// held.
func TestConcurrencyPendingReleasesBounded(t *testing.T) {
	const n = redislimit.PendingReleasesMax + 1
	const expiry = time.Hour
	ctx := context.Background()
	rec, logger := newLogRecorder(slog.LevelWarn)
	c := shared.client(t)
	f := addFaults(c)
	mock := newMock()
	lim, err := redislimit.NewConcurrency(c, "test", n, redislimit.WithPrefix(testKey(t, "p")+":"), keylimit.WithClock(mock),
		redislimit.WithHoldExpiry(expiry), keylimit.WithLogger(logger), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	defer lim.Close()
	key := testKey(t, "k")
	permits := make([]keylimit.Permit, n)
	for i := range permits {
		p, r := lim.TryAcquire(key, 1)
		require.True(t, r.Allowed)
		permits[i] = p
	}
	f.on.Store(true)
	var wg sync.WaitGroup
	for _, p := range permits {
		wg.Go(p.Release)
	}
	wg.Wait()
	f.on.Store(false)
	held := func() int64 {
		h, err := shared.client(t).ZCard(ctx, lim.StateKey(key)).Result()
		require.NoError(t, err)
		return h
	}
	require.Equal(t, int64(n), held(), "slots held after the failed releases")
	mock.Add(expiry / 2) // a renewal period: the renewer ticks
	lines := rec.waitLogged(t, "redislimit: failed releases given up: their slots come back when their holds expire")
	require.Len(t, lines, 1)
	require.Equal(t, "1", lines[0].Attrs["releases"])
	require.Equal(t, int64(1), held(), "slots held after the retries")
}

// TestConcurrencyCloseRetriesReleases: Close tries once more the releases
// that failed; those that fail again, Redis still out of reach, are given
// up (logged): Close returns, and nothing retries them after it.
func TestConcurrencyCloseRetriesReleases(t *testing.T) {
	for _, tt := range []struct {
		name string
		down bool // Redis still out of reach at Close
		held int64
	}{{"RedisBack", false, 0}, {"RedisDown", true, 2}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			rec, logger := newLogRecorder(slog.LevelWarn)
			c := shared.client(t)
			f := addFaults(c)
			mock := newMock() // it stands still: the renewer never ticks
			lim, err := redislimit.NewConcurrency(c, "test", 3, redislimit.WithPrefix(testKey(t, "p")+":"), keylimit.WithClock(mock),
				keylimit.WithLogger(logger))
			require.NoError(t, err)
			key := testKey(t, "k")
			p, r := lim.TryAcquire(key, 1)
			require.True(t, r.Allowed)
			q, r := lim.TryAcquire(key, 2)
			require.True(t, r.Allowed)
			f.on.Store(true)
			p.Release()
			q.Release()
			f.on.Store(tt.down)
			require.NoError(t, lim.Close())
			f.on.Store(false)
			lines := rec.logged("redislimit: failed releases given up: their slots come back when their holds expire")
			if tt.down {
				require.Len(t, lines, 1)
				require.Equal(t, "2", lines[0].Attrs["releases"])
			} else {
				require.Empty(t, lines)
			}
			mock.Add(time.Hour) // no renewer left to tick
			h, err := shared.client(t).ZCard(ctx, lim.StateKey(key)).Result()
			require.NoError(t, err)
			require.Equal(t, tt.held, h, "holds left after Close")
		})
	}
}

// stuckRenewals makes every renewal script call hang until its context
// ends, as on a Redis that stopped answering, counts them, and keeps how
// the last one's context ended.
type stuckRenewals struct {
	on    atomic.Bool
	calls atomic.Int64
	ended atomic.Value // error
}

func (s *stuckRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *stuckRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.on.Load() && slices.Contains(cmd.Args(), any("renew")) {
			s.calls.Add(1)
			<-ctx.Done()
			s.ended.Store(ctx.Err())
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (s *stuckRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestConcurrencyCloseEndsRenewals: Close stops the renewer within the
// renewal in flight. With live holds and a renewal that hangs until its
// timeout (10 s here), Close had waited for the timeout, and the renewer
// had then gone on to the next hold; now Close cancels the call in flight
// and no other renewal starts.
func TestConcurrencyCloseEndsRenewals(t *testing.T) {
	const holds = 20
	const expiry = time.Hour
	c := shared.client(t)
	stuck := new(stuckRenewals)
	c.AddHook(stuck)
	mock := newMock()
	lim, err := redislimit.NewConcurrency(c, "test", holds, redislimit.WithPrefix(testKey(t, "p")+":"), keylimit.WithClock(mock),
		redislimit.WithHoldExpiry(expiry), redislimit.WithTimeout(patient), redislimit.WithFailurePolicy(redislimit.FailClosed()))
	require.NoError(t, err)
	key := testKey(t, "k")
	for range holds {
		_, r := lim.TryAcquire(key, 1)
		require.True(t, r.Allowed)
	}
	stuck.on.Store(true)
	mock.Add(expiry / 2) // a renewal period: the renewer ticks, and hangs on the first hold
	require.True(t, waitFor(func() bool { return stuck.calls.Load() == 1 }, 5*time.Second), "the renewer's first call")
	require.NoError(t, lim.Close())
	require.Equal(t, int64(1), stuck.calls.Load(), "renewals started by the time Close returned")
	require.ErrorIs(t, stuck.ended.Load().(error), context.Canceled, "how the renewal in flight ended: cancelled by Close, not timed out")
}
