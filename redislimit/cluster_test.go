package redislimit_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestCluster runs the limiters on a real Redis Cluster: 3 masters, each
// holding a third of the slots, and a replica of the first, started by the
// tests (redisserver.StartCluster). In turn: the behaviour suite, the fleet
// exactness test with three cluster clients, a joined decision in one
// script call on the slot of the key, and last a failover of the first
// master to its replica while a limit is hammered.
func TestCluster(t *testing.T) {
	t.Parallel() // with the other tests that sleep on real time
	cl := theCluster(t)
	t.Logf("the cluster started in %v", clusterStart)
	c := clusterClient(t, cl)

	t.Run("Behaviour", func(t *testing.T) {
		for _, typ := range types {
			t.Run(typ.name, func(t *testing.T) {
				t.Parallel()
				runSuite(t, c, typ.new)
			})
		}
	})
	t.Run("Fleet", func(t *testing.T) {
		fleetAdmitsTheLimit(t, func(t testing.TB) redis.UniversalClient { return clusterClient(t, cl) })
	})
	t.Run("Joined", func(t *testing.T) { joinedOnCluster(t, cl, c) })
	t.Run("AnyKey", func(t *testing.T) { anyKeyOnCluster(t, c) })
	t.Run("SharedCalls", func(t *testing.T) { sharedCallsOnCluster(t, c) })
	t.Run("Concurrency", func(t *testing.T) { concurrencyOnCluster(t, cl, c) })
	t.Run("Penalty", func(t *testing.T) { penaltyOnCluster(t, cl) })
	t.Run("Leases", func(t *testing.T) { leasesOnCluster(t, c) })
	t.Run("PacedLeases", func(t *testing.T) { pacedLeasesOnCluster(t, c) })
	t.Run("Failover", func(t *testing.T) { failover(t, cl) })
}

// leasesOnCluster: a fleet of three leased fixed windows on a cluster
// client, one of them holding a lease, admits exactly each window's events for keys in different slots
// (a key beginning with '}' among them), every lease spent, as on one
// server (TestLeasesAFixedWindowExactly), and no call fails.
func leasesOnCluster(t *testing.T, c *redis.ClusterClient) {
	mock := newMock() // at the start of a minute
	var errs errorLog
	prefix := testKey(t, "p") + ":"
	var fleet []keylimit.Limiter[string]
	for range 3 {
		w, err := redislimit.NewFixedWindow(c, "leased", keylimit.PerMinute(500),
			append(onMock(mock), redislimit.WithLeases(time.Minute), redislimit.WithTimeout(patient),
				redislimit.WithPrefix(prefix), redislimit.WithOnError(errs.add))...)
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		fleet = append(fleet, w)
	}
	for _, key := range []string{"a", "b", "c", "}d", "{e}"} {
		for window := range 2 {
			// One instance first, until it holds a lease of 8 or more
			// (warm fails if none comes): the count below is then the
			// leases' too.
			warmed := warm(t, fleet[0], key, 8)
			require.Equal(t, 500, warmed+roundRobin(fleet, key), "key %q, window %d: events admitted", key, window)
			mock.Add(time.Minute)
		}
	}
	require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
}

// pacedLeasesOnCluster: three leased TokenBuckets of 100/s (a burst of 10)
// with leases of 20 ms on a cluster client, a fleet large enough for the
// share rule (4 × 3 × 10 ms > 20 ms), asked in turn each 5 ms of a mock
// clock for a second, on keys in different slots (a key beginning with '}'
// among them): the fleet's set beside each key's state shares its slot (no
// call fails, no CROSSSLOT), each key admits no more than its bound (10 +
// 100 over the second), every instance admits, and the instances are
// paced (refused in process with a RetryAfter longer than an interval).
func pacedLeasesOnCluster(t *testing.T, c *redis.ClusterClient) {
	mock := newMock()
	var errs errorLog
	prefix := testKey(t, "p") + ":"
	limit := keylimit.PerSecond(100).WithBurst(10)
	var fleet []*redislimit.TokenBucket
	for range 3 {
		b, err := redislimit.NewTokenBucket(c, "paced", limit,
			append(onMock(mock), redislimit.WithLeases(20*time.Millisecond), redislimit.WithTimeout(patient),
				redislimit.WithPrefix(prefix), redislimit.WithOnError(errs.add))...)
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		fleet = append(fleet, b)
	}
	for _, key := range []string{"a", "b", "c", "}d", "{e}"} {
		admitted := make([]int, len(fleet))
		paced := 0
		for step := range 200 {
			for i, b := range fleet {
				for range 20 {
					r := b.Take(key, 1)
					if !r.Allowed {
						if r.RetryAfter > 10*time.Millisecond {
							paced++
						}
						break
					}
					admitted[i]++
				}
			}
			if step < 199 {
				mock.Add(5 * time.Millisecond)
			}
		}
		total := admitted[0] + admitted[1] + admitted[2]
		require.LessOrEqual(t, total, 10+100, "key %q: events admitted over the second (each instance: %v)", key, admitted)
		for i, a := range admitted {
			require.Positive(t, a, "key %q: instance %d admitted nothing (each: %v)", key, i, admitted)
		}
		require.Positive(t, paced, "key %q: refusals with a pace", key)
		t.Logf("key %q: %d of the bound 110 admitted (each instance: %v), %d paced refusals", key, total, admitted, paced)
	}
	require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
}

// joinedOnCluster: keylimit.All of two Redis limiters on a cluster client
// is joined, and each decision is one EVALSHA, on the node of the key's
// slot, for keys all over the cluster: the key is the hash tag of both
// states. A prefix with a '{' would move the tag into the prefix, so such
// limiters are not joined, and All decides limiter by limiter, as exactly.
func joinedOnCluster(t *testing.T, cl *redisserver.Cluster, c *redis.ClusterClient) {
	newLim := func(prefix string) redisLimiter {
		lim, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerHour(3), redislimit.WithPrefix(prefix),
			redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
		require.NoError(t, err)
		return lim
	}
	a, b := newLim(testKey(t, "a")+":"), newLim(testKey(t, "b")+":")
	lim, ok := keylimit.All[string](a, b).(joinedLimiter)
	require.True(t, ok, "All of two Redis limiters on one cluster client is not joined")
	masters := make([]*server, len(cl.Masters))
	for i, m := range cl.Masters {
		masters[i] = &server{Server: m}
	}
	evalsha := func() (n int64) {
		for _, m := range masters {
			n += m.commandStats(t)["evalsha"]
		}
		return n
	}
	// A key on each master: keys are drawn until every master has one.
	byNode := map[string]string{}
	for i := 0; len(byNode) < len(cl.Masters); i++ {
		require.Less(t, i, 1000, "1000 keys, and not one on each master: %v", byNode)
		key := testKey(t, "k")
		node, err := c.MasterForKey(context.Background(), stateKey(a, key))
		require.NoError(t, err)
		byNode[node.Options().Addr] = key
	}
	i := 0
	for _, key := range byNode {
		i++
		lim.Peek(key) // the client has learned where the slot is
		before := evalsha()
		r, err := lim.TakeContext(context.Background(), key, 2)
		require.NoError(t, err, "key %d", i)
		require.True(t, r.Allowed, "key %d: %v", i, r)
		require.Equal(t, before+1, evalsha(), "key %d: script calls for one decision", i)
		require.Equal(t, 1, a.Peek(key).Remaining, "key %d: the first limit", i)
		require.Equal(t, 1, b.Peek(key).Remaining, "key %d: the second limit", i)
	}

	tagged := keylimit.All[string](newLim("{tenant}:a:"), newLim("{tenant}:b:"))
	_, joined := tagged.(joinedLimiter)
	require.False(t, joined && strings.HasPrefix(fmtType(tagged), "*redislimit."), "limiters whose prefixes hold a '{' were joined on a cluster")
	key := testKey(t, "k")
	require.True(t, tagged.AllowN(key, 3), "AllowN(3) limiter by limiter")
	require.False(t, tagged.Allow(key), "Allow after 3 of 3")
}

// anyKeyOnCluster pins issue 24.1: the state of key k was prefix{k}, so a
// key with a '}' (or an empty one) emptied or chose the hash tag, the states
// of one key under the limiters of a joined All landed in different slots,
// and every call failed with CROSSSLOT while Redis was healthy (with key
// "}x", 200 calls on 10/min + 100/h admitted 200 under FailOpen, 10 with 2
// errors a call under FailLocal(1), none under FailClosed). Now no key can:
// 200 calls admit 10 under every policy, with no error, and so do keys of
// every byte, decided in one call each, and Reset and Refund on them.
func anyKeyOnCluster(t *testing.T, c *redis.ClusterClient) {
	var minute *redislimit.TokenBucket // the first limiter of the last All made
	newAll := func(t *testing.T, opts ...redislimit.Option) joinedLimiter {
		prefix := testKey(t, "p")
		opts = append(opts, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
		var err error
		minute, err = redislimit.NewTokenBucket(c, "test", keylimit.PerMinute(10), append(opts, redislimit.WithPrefix(prefix+":m:"))...)
		require.NoError(t, err)
		hour, err := redislimit.NewFixedWindow(c, "test", keylimit.PerHour(100), append(opts, redislimit.WithPrefix(prefix+":h:"))...)
		require.NoError(t, err)
		lim, joined := keylimit.All[string](minute, hour).(joinedLimiter)
		require.True(t, joined, "All of two Redis limiters on one cluster client is not joined")
		return lim
	}
	for _, p := range []struct {
		name   string
		policy redislimit.FailurePolicy
	}{{"FailOpen", redislimit.FailOpen()}, {"FailLocal(1)", redislimit.FailLocal(1)}, {"FailClosed", redislimit.FailClosed()}} {
		t.Run(p.name, func(t *testing.T) {
			var errs errorLog
			lim := newAll(t, redislimit.WithFailurePolicy(p.policy), redislimit.WithOnError(errs.add))
			admitted := 0
			for range 200 {
				if lim.Allow("}x") {
					admitted++
				}
			}
			t.Logf("200 calls on 10/min + 100/h, key \"}x\", %s: admitted %d, errors %d", p.name, admitted, errs.len())
			require.Equal(t, 10, admitted, "admitted of 200")
			require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
		})
	}
	t.Run("EveryByte", func(t *testing.T) {
		var errs errorLog
		lim := newAll(t, redislimit.WithOnError(errs.add), redislimit.WithFailurePolicy(redislimit.FailClosed()))
		keys := []string{"}", "}}{{", "", "{", "{}", "}{", "a}b", "{a}", "a{b}c", "\x00}", strings.Repeat("}", 300)}
		for b := range 256 {
			if c := string([]byte{byte(b)}); c != "}" && c != "{" {
				keys = append(keys, c)
			}
			keys = append(keys, "k"+string([]byte{byte(b)})+"}")
		}
		ctx := context.Background()
		for _, key := range keys {
			r, err := lim.TakeContext(ctx, key, 10)
			require.NoError(t, err, "key %q", key)
			require.True(t, r.Allowed, "10 of 10 for key %q: %v", key, r)
			r, err = lim.TakeContext(ctx, key, 1)
			require.NoError(t, err, "key %q", key)
			require.False(t, r.Allowed, "the 11th for key %q: %v", key, r)
			n, err := c.Exists(ctx, minute.StateKey(key)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "key %q: the state at StateKey %q", key, minute.StateKey(key))
		}
		for _, key := range keys[:20] {
			lim.Reset(key)
			_, a, err := lim.AdmitContext(ctx, key, 10)
			require.NoError(t, err, "key %q after Reset", key)
			require.NoError(t, lim.RefundContext(ctx, key, a), "Refund %q", key)
			require.True(t, lim.AllowN(key, 10), "10 for key %q after the Refund", key)
		}
		require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
	})
}

// sharedCallsOnCluster (issue 38): the slot the coalescer groups a
// Cluster's takes by is the server's (CLUSTER KEYSLOT) for any state key;
// and 64 goroutines taking at once on 8 keys, four of them in one slot,
// are decided exactly (100 of each key's 1000 calls, no error) in fewer
// script calls than takes: the takes of a slot share calls, and none was
// sent to a node that does not hold its slot.
func sharedCallsOnCluster(t *testing.T, c *redis.ClusterClient) {
	ctx := context.Background()
	var errs errorLog
	lim, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(100), redislimit.WithPrefix(testKey(t, "p")+":"),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0), redislimit.WithOnError(errs.add),
		redislimit.WithFailurePolicy(redislimit.FailClosed()))
	require.NoError(t, err)
	defer lim.Close()
	pinged(t, lim)
	r := rand.New(rand.NewPCG(38, 1))
	for i := range 500 {
		key := string(rune('a'+r.IntN(26))) + strconv.Itoa(r.IntN(1e6))
		if i%5 == 0 {
			key += "}{x}"
		}
		for _, k := range []string{lim.StateKey(key), key, "{" + key, "{}" + key, "x{}{" + key + "}"} {
			want, err := c.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.EqualValues(t, want, redislimit.HashSlot(k), "the slot of %q", k)
		}
	}
	// Keys in one slot: the first found for each of four.
	var keys []string
	slot := redislimit.HashSlot(lim.StateKey("k0"))
	for i := 0; len(keys) < 4; i++ {
		if k := "k" + strconv.Itoa(i); redislimit.HashSlot(lim.StateKey(k)) == slot {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "a", "b", "c", "d")
	calls := func() (n int64) {
		require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.Info(ctx, "commandstats").Result()
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
					v, _, _ := strings.Cut(rest, ",")
					x, _ := strconv.ParseInt(v, 10, 64)
					atomic.AddInt64(&n, x)
				}
			}
			return err
		}))
		return n
	}
	before := calls()
	for k, n := range admittedPerKey(lim, keys, 64, 125) {
		require.EqualValues(t, 100, n, "admitted on key %q", keys[k])
	}
	require.Zero(t, errs.len(), "errors, the first: %v", firstError(&errs))
	sent := calls() - before
	t.Logf("8000 takes in %d script calls", sent)
	require.Less(t, sent, int64(8000), "script calls")
}

// firstError returns the first error l collected, or nil.
func firstError(l *errorLog) error {
	if errs := l.list(); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// failover fails the first master over to its replica with CLUSTER
// FAILOVER (redisserver.Cluster.Failover), while 8 goroutines hammer one
// key of its slots with a sliding window of 300 an hour (no refill during
// the test), and measures what the limit admits across it. A manual
// failover waits for the replica to catch up before it swaps, so Redis
// loses no admission: every call waits out the swap (a patient timeout;
// FailClosed, so that a call that failed would not admit) and exactly 300
// are admitted. The test logs how many calls failed: with none, the
// default timeout and FailLocal would have admitted as exactly.
func failover(t *testing.T, cl *redisserver.Cluster) {
	const quota = 300
	c := clusterClient(t, cl)
	var key string
	for {
		key = testKey(t, "k")
		node, err := c.MasterForKey(context.Background(), "{"+key+"}")
		require.NoError(t, err)
		if node.Options().Addr == cl.Masters[0].Addr {
			break
		}
	}
	var errs errorLog
	lim, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerHour(quota), redislimit.WithTimeout(patient),
		redislimit.WithFailurePolicy(redislimit.FailClosed()), redislimit.WithDenyCacheSize(0), redislimit.WithOnError(errs.add))
	require.NoError(t, err)
	var admitted, calls atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stop.Load() && admitted.Load() < quota {
				calls.Add(1)
				if lim.Allow(key) {
					admitted.Add(1)
				}
			}
		})
	}
	for admitted.Load() < quota/3 {
		time.Sleep(time.Millisecond)
	}
	atFailover := admitted.Load()
	start := time.Now()
	require.NoError(t, cl.Failover(0))
	took := time.Since(start)
	for deadline := time.Now().Add(patient); admitted.Load() < quota && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("a failover of the key's master after %d admissions took %v: %d admitted of %d, in %d calls, %d of them failed",
		atFailover, took, admitted.Load(), quota, calls.Load(), errs.len())
	require.EqualValues(t, quota, admitted.Load(), "admitted across the failover")
	r := lim.Peek(key)
	require.False(t, r.Allowed, "Peek on the new master after the quota: %v", r)
}
