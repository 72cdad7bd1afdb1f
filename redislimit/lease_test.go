package redislimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/schedprobe"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The tests of leased quotas (WithLeases). Those that count exactly run on a
// mock clock that the scripts take their time from too (WithScriptClock),
// so that a lease's time is up only when the test says; the fleet tests
// run on Redis's own clock, and bound what they count by it.

// leased returns a TokenBucket named "leased" on c with leases of d, closed
// when the test ends.
func leased(t *testing.T, c redis.UniversalClient, l keylimit.Limit, d time.Duration, opts ...redislimit.Option) *redislimit.TokenBucket {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithLeases(d), redislimit.WithTimeout(patient)}, opts...)
	lim, err := redislimit.NewTokenBucket(c, "leased", l, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	return lim
}

// onMock are the options of a limiter whose local time and scripts' time are
// mock's.
func onMock(mock *clock.Mock) []redislimit.Option {
	return []redislimit.Option{keylimit.WithClock(mock), redislimit.WithScriptClock(mock)}
}

// warm asks lim for key one event at a time, on a clock that stands still,
// until a call fetches a lease of at least want events beyond its own, and
// returns the events it admitted. Each fetch asks twice what the last took,
// so it takes about 2 × want calls.
func warm(t *testing.T, lim keylimit.Limiter[string], key string, want int) int {
	t.Helper()
	for admitted := 1; admitted <= 100*want; admitted++ {
		r := lim.Take(key, 1)
		require.True(t, r.Allowed, "call %d while warming: %v", admitted, r)
		if held := redislimit.LeaseHeld(lim, key); held >= want {
			require.Equal(t, held, r.Remaining, "the Remaining of the call that fetched a lease")
			return admitted
		}
	}
	require.FailNow(t, "no lease", "no lease of %d events after %d calls", want, 100*want)
	return 0
}

// drain asks lim for key until it refuses, and returns the events admitted.
func drain(t *testing.T, lim keylimit.Limiter[string], key string) int {
	t.Helper()
	for n := 0; n < 1_000_000; n++ {
		if !lim.Allow(key) {
			return n
		}
	}
	require.FailNow(t, "never refused", "a million calls admitted")
	return 0
}

// TestLeaseCountsFromItsEnd pins why a bucket's lease counts its events from
// the end of the lease time: instance A leases 100 events at t0 and spends
// none, the bucket refills in Redis, and just before A's lease time is up
// instance B takes all it can and A spends its lease. Had the lease counted
// from t0, Redis would have refilled the 100 by then, B would take the whole
// burst, and 1,100 events would pass at one instant; the limit allows
// 1,000. Counted from t0 + d, B gets what leaves room for A's 100.
func TestLeaseCountsFromItsEnd(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	l := keylimit.PerSecond(1000) // burst 1,000, one event a ms
	const d = 500 * time.Millisecond
	a := leased(t, c, l, d, onMock(mock)...)
	b, err := redislimit.NewTokenBucket(c, "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	key := testKey(t, "k")

	before := warm(t, a, key, 100) // 1, 2, 4, ... 64 events, then one of a lease of 101
	held := a.Peek(key).Remaining
	require.Equal(t, 100, held, "what A's lease holds after the call that fetched it")
	mock.Add(d - time.Millisecond)
	nb := drain(t, b, key)
	na := drain(t, a, key)
	require.Equal(t, held, na, "A spends what its lease held, and no more")
	require.LessOrEqual(t, nb+na, l.BurstSize(), "events admitted at one instant (B %d, A %d)", nb, na)
	require.LessOrEqual(t, before+nb+na, l.BurstSize()+int((d-time.Millisecond)/l.WithBurst(1).FillTime()), "events admitted in [t0, t0 + d - 1ms]")
	// Exactly: A took 1 event, then leases of 2 + 4 + ... + 64 + 101 = 227
	// counted from t0 + d, so B found the bucket 500 + 227 - 499 ms from full.
	require.Equal(t, 1000-228, nb, "what B got")
}

// TestLeasesAFixedWindowExactly: three instances with leases, asked in turn
// until each refuses, admit exactly the window's events, no more and no
// fewer (every lease is spent), in each window; and with a bucket at one
// instant, at most the burst.
func TestLeasesAFixedWindowExactly(t *testing.T) {
	mock := newMock() // at the start of a minute
	c := shared.client(t)
	key := testKey(t, "k")
	var fleet []keylimit.Limiter[string]
	for range 3 {
		w, err := redislimit.NewFixedWindow(c, "leased", keylimit.PerMinute(1000),
			append(onMock(mock), redislimit.WithLeases(time.Minute), redislimit.WithTimeout(patient))...)
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		fleet = append(fleet, w)
	}
	for window := range 3 {
		require.Equal(t, 1000, roundRobin(fleet, key), "window %d: events admitted", window)
		mock.Add(time.Minute)
	}

	var buckets []keylimit.Limiter[string]
	for range 3 {
		buckets = append(buckets, leased(t, c, keylimit.PerSecond(1000), 100*time.Millisecond, onMock(mock)...))
	}
	got := roundRobin(buckets, key)
	// The first lease's events count from t0 + 100 ms: the 100 events that
	// would refill by then are not leased at t0. And once the bucket holds
	// less than 100 (a tenth of its burst), a fetch takes an eighth of it
	// and leaves the instance short, to wait: less than 100 stay in Redis.
	require.True(t, got <= 1000 && got > 800, "a bucket of 1,000 at one instant admitted %d", got)
}

// roundRobin asks each of fleet for key in turn until a round admits
// nothing, and returns the events admitted.
func roundRobin(fleet []keylimit.Limiter[string], key string) int {
	total := 0
	for round := 0; round < 100_000; round++ {
		admitted := 0
		for _, lim := range fleet {
			if lim.Allow(key) {
				admitted++
			}
		}
		if admitted == 0 {
			break
		}
		total += admitted
	}
	return total
}

// TestLeasedRareKeyIsDecidedAsWithout: a key asked once a second (or once a
// lease time) leases nothing: each decision is one script call, with the
// Result a limiter without leases gives, exactly; and a key whose quota is
// below 10 never leases, its refusals remembered by the deny cache as
// without leases.
func TestLeasedRareKeyIsDecidedAsWithout(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	l := keylimit.PerSecond(10_000).WithBurst(3)
	lim := leased(t, c, keylimit.PerSecond(10_000), 20*time.Millisecond, onMock(mock)...)
	plain, err := redislimit.NewTokenBucket(c, "plain", keylimit.PerSecond(10_000), append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	few := leased(t, c, l, 20*time.Millisecond, onMock(mock)...)
	fewPlain, err := redislimit.NewTokenBucket(c, "fewplain", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	for _, l := range []keylimit.Limiter[string]{lim, plain, few, fewPlain} {
		pinged(t, l)
	}
	key := testKey(t, "k")
	before := s.commandStats(t)
	const decisions = 12
	for i := range decisions {
		n := 1 + i%3
		require.Equal(t, plain.Take(key, n), lim.Take(key, n), "decision %d, a second after the last", i)
		// A quota below 10 never leases: five calls at one instant, the
		// fourth refused by Redis, the fifth by the deny cache.
		for j := range 5 {
			require.Equal(t, fewPlain.Take(key, 1), few.Take(key, 1), "decision %d.%d, quota 3", i, j)
		}
		mock.Add(time.Second)
	}
	sent := s.sentSince(t, before)
	require.Equal(t, map[string]int64{"evalsha": 2 * 5 * decisions}, sent, "commands sent")
	require.Equal(t, uint64(decisions), few.Stats().CacheHits, "refusals the deny cache answered, with leases")
	require.Equal(t, fewPlain.Stats(), few.Stats(), "Stats with leases and without")
}

// TestLeaseAdmitsWithoutRedis: a key with a live lease is decided in
// process: no command reaches Redis, and Allow allocates nothing (Admit
// allocates its Admission, bound to its key); Remaining
// counts down the lease; Refund gives back to the lease; Close gives what
// the lease holds back to Redis, exactly.
func TestLeaseAdmitsWithoutRedis(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	l := keylimit.PerSecond(1000)
	lim := leased(t, c, l, 100*time.Millisecond, onMock(mock)...)
	plain, err := redislimit.NewTokenBucket(c, "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	pinged(t, lim)
	key := testKey(t, "k")
	warm(t, lim, key, 100)
	inRedis := plain.Peek(key).Remaining

	before := s.commandStats(t)
	r, a := lim.Admit(key, 1)
	require.True(t, r.Allowed && r.Remaining == 99, "Admit from the lease: %v", r)
	require.Equal(t, 97, lim.Take(key, 2).Remaining, "Take(2) from the lease")
	lim.Refund(key, a)
	require.Equal(t, 98, lim.Peek(key).Remaining, "Peek after the Refund went back to the lease")
	allocs := testing.AllocsPerRun(50, func() { lim.Allow(key) })
	require.Zero(t, allocs, "allocations of a decision from a lease")
	allocs = testing.AllocsPerRun(50, func() {
		_, a := lim.Admit(key, 1)
		lim.Refund(key, a)
	})
	require.Equal(t, 1.0, allocs, "allocations of an Admit from a lease and its Refund: the Admission, bound to its key")
	require.Empty(t, s.sentSince(t, before), "commands sent while the lease served")
	left := lim.Peek(key).Remaining

	require.NoError(t, lim.Close())
	require.Equal(t, inRedis+left, plain.Peek(key).Remaining, "tokens in Redis after Close gave back the lease's %d", left)
	require.Equal(t, map[string]int64{"evalsha": 2}, s.sentSince(t, before), "commands sent: Close's return, and the Peek")
}

// TestLeaseTimeIsUp: once a lease's time is up, nothing is spent from it:
// the next call fetches anew, and the sweeper gives back what the lease held
// (all of it, here: the bucket is far enough from full), as does a Refund of
// an admission it made.
func TestLeaseTimeIsUp(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	l := keylimit.PerSecond(1000)
	const d = 100 * time.Millisecond
	lim := leased(t, c, l, d, onMock(mock)...)
	plain, err := redislimit.NewTokenBucket(c, "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	key := testKey(t, "k")
	warm(t, lim, key, 100)
	_, a := lim.Admit(key, 1)
	held := lim.Peek(key).Remaining
	require.Equal(t, 99, held)
	inRedis := plain.Peek(key).Remaining

	mock.Add(d) // its ticker may start a sweep too
	redislimit.SweepLeases(lim)
	refill := int(d / l.WithBurst(1).FillTime())
	require.Equal(t, inRedis+refill+held, plain.Peek(key).Remaining, "tokens in Redis after the sweeper gave back %d", held)
	lim.Refund(key, a)
	require.Equal(t, inRedis+refill+held+1, plain.Peek(key).Remaining, "tokens in Redis after a Refund from the ended lease")
	// The key spent 2 events of its last lease in a lease time: the next
	// call fetches a lease of 1 beyond its own.
	require.Equal(t, 1, warm(t, lim, key, 1), "calls until a lease, after the last one's time")
	require.Equal(t, 1, redislimit.LeaseHeld(lim, key), "the lease sized by what the key spent")
}

// TestLeaseSweeperSleepsUntilDue (issue 39): the lease sweeper wakes only
// when something is due, on the limiter's clock: the end of a lease that
// holds events, which it gives back then, and the time to forget a key.
// A lease of 100 events taken at t0 with leases of 100 ms, and the clock
// stepped 10 ms at a time: the sweeper wakes once at t0 + 100 ms, and the
// events are back in Redis then; while no lease is live it does not wake
// until t0 + 200 ms, when it forgets the key, and stops. The sweeper that
// ticked every 50 ms woke at t0 + 50 ms, and 4 times by t0 + 200 ms.
func TestLeaseSweeperSleepsUntilDue(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	l := keylimit.PerSecond(1000)
	const d, step = 100 * time.Millisecond, 10 * time.Millisecond
	lim := leased(t, c, l, d, onMock(mock)...)
	plain, err := redislimit.NewTokenBucket(c, "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	key := testKey(t, "k")
	warm(t, lim, key, 100)
	held := redislimit.LeaseHeld(lim, key)
	inRedis := plain.Peek(key).Remaining
	woke, running := redislimit.SweeperWakes(lim)
	require.True(t, running, "the sweeper, with a key remembered")
	t.Logf("the sweeper woke %d times while the key fetched leases", woke)
	t0 := mock.Now()
	advance := func(to time.Duration, wakes int64, what string) {
		t.Helper()
		for mock.Since(t0) < to {
			mock.Add(step)
			w, _ := redislimit.SweeperWakes(lim)
			require.Equal(t, woke+wakes, w, "wake-ups of the sweeper at t0 + %v, %s", mock.Since(t0), what)
		}
	}
	advance(d-step, 0, "while the lease lasts")
	require.Equal(t, held, redislimit.LeaseHeld(lim, key), "the lease before its end")

	mock.Add(step)
	w, running := redislimit.SweeperWakes(lim)
	require.Equal(t, woke+1, w, "wake-ups of the sweeper at the lease's end")
	require.True(t, running, "the sweeper, with the key remembered")
	require.Zero(t, redislimit.LeaseHeld(lim, key), "the lease after its end")
	refill := int(d / l.WithBurst(1).FillTime())
	require.Equal(t, inRedis+refill+held, plain.Peek(key).Remaining, "tokens in Redis after the sweeper gave back %d", held)

	advance(2*d-step, 1, "with no lease live")
	mock.Add(step)
	w, running = redislimit.SweeperWakes(lim)
	require.Equal(t, woke+2, w, "wake-ups of the sweeper when the key is forgotten")
	require.False(t, running, "the sweeper, once no key is left")
	advance(10*d, 2, "with no key")
}

// TestLeaseSweeperWakesOnRefund: a Refund that makes a spent lease hold
// events again wakes the sweeper, which then wakes at the lease's end and
// gives the refunded events back to Redis exactly then. Leases of 100 ms,
// the clock stepped 10 ms at a time: key b leases at t0, key a at t0 + 50
// ms, and a's lease is spent at once. At t0 + 100 ms the sweeper wakes for
// b's end; a's lease holds nothing, so it sleeps past a's end, until b is
// to be forgotten at t0 + 200 ms. At t0 + 120 ms one of a's admissions is
// refunded: the sweeper wakes then, to plan again, and once more at t0 +
// 150 ms, a's end, when the event is back in Redis. Without that wake-up it
// would sleep until t0 + 200 ms, and the event would stay in the ended
// lease until then.
func TestLeaseSweeperWakesOnRefund(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	l := keylimit.PerSecond(1000)
	const d, step = 100 * time.Millisecond, 10 * time.Millisecond
	lim := leased(t, c, l, d, onMock(mock)...)
	plain, err := redislimit.NewTokenBucket(c, "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	a, b := testKey(t, "a"), testKey(t, "b")
	t0 := mock.Now()
	warm(t, lim, b, 100)
	woke, running := redislimit.SweeperWakes(lim)
	require.True(t, running, "the sweeper, with a key remembered")
	advance := func(to time.Duration, wakes int64, what string) {
		t.Helper()
		for mock.Since(t0) < to {
			mock.Add(step)
			w, _ := redislimit.SweeperWakes(lim)
			require.Equal(t, woke+wakes, w, "wake-ups of the sweeper at t0 + %v, %s", mock.Since(t0), what)
		}
	}
	advance(d/2, 0, "while b's lease lasts")

	warm(t, lim, a, 100)
	w, _ := redislimit.SweeperWakes(lim)
	require.Equal(t, woke, w, "wake-ups of the sweeper after a's fetches, which end after b's lease")
	held := redislimit.LeaseHeld(lim, a)
	spent := make([]keylimit.Admission, 0, held)
	for i := range held {
		r, adm := lim.Admit(a, 1)
		require.True(t, r.Allowed, "admission %d from a's lease: %v", i, r)
		spent = append(spent, adm)
	}
	require.Zero(t, redislimit.LeaseHeld(lim, a), "a's lease once spent")
	inRedis := plain.Peek(a).Remaining

	advance(d-step, 0, "while b's lease lasts")
	mock.Add(step)
	w, running = redislimit.SweeperWakes(lim)
	require.Equal(t, woke+1, w, "wake-ups of the sweeper at the end of b's lease")
	require.True(t, running, "the sweeper, with keys remembered")
	require.Zero(t, redislimit.LeaseHeld(lim, a), "a's spent lease")
	advance(d+2*step, 1, "a's lease spent, b not yet forgotten")

	lim.Refund(a, spent[0])
	require.Equal(t, 1, redislimit.LeaseHeld(lim, a), "a's lease after the Refund")
	w, running = redislimit.SweeperWakes(lim)
	require.Equal(t, woke+2, w, "wake-ups of the sweeper after a Refund to a's spent lease")
	require.True(t, running, "the sweeper, with keys remembered")

	advance(d+d/2-step, 2, "while a's lease lasts")
	require.Equal(t, 1, redislimit.LeaseHeld(lim, a), "a's lease before its end")
	mock.Add(step)
	w, running = redislimit.SweeperWakes(lim)
	require.Equal(t, woke+3, w, "wake-ups of the sweeper at the end of a's lease")
	require.True(t, running, "the sweeper, with keys remembered")
	require.Zero(t, redislimit.LeaseHeld(lim, a), "a's lease after its end")
	refill := int(d / l.WithBurst(1).FillTime())
	require.Equal(t, inRedis+refill+1, plain.Peek(a).Remaining, "tokens in Redis for a after the sweeper gave back the refunded event")
}

// TestLeaseWaitsForTheRefill: a hot key that drained the bucket is refused
// in process, without a round trip, until the bucket could hold leaseShare
// (8) times what its last fetch missed (at most a lease time, less a random
// part of up to half); RetryAfter says when. Then one call fetches a lease.
// The counts are exact: the first call is a plain take (1 event); the
// leases count from t0 + 100 ms, so 900 events fit in them: leases of 2, 4,
// ... 64, then seven of 101; then the bucket holds 66, less than a tenth of
// its burst, and the fetch takes 1 and an eighth of the 65 beyond (8), 92
// short of the 101 asked, and leaves 58: the key waits between 50 and 100
// ms (min(100 ms, 8 × 92 ms)). At t0 + 100 ms the bucket holds 158, and a
// fetch takes the 101 asked.
func TestLeaseWaitsForTheRefill(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	lim := leased(t, s.client(t), keylimit.PerSecond(1000), 100*time.Millisecond, onMock(mock)...)
	pinged(t, lim)
	key := testKey(t, "k")
	require.Equal(t, 1+126+7*101+9, drain(t, lim, key), "events admitted at t0")
	r := lim.Take(key, 1)
	require.False(t, r.Allowed, "after the burst: %v", r)
	require.Zero(t, r.Remaining, "after the burst")
	require.True(t, r.RetryAfter >= 50*time.Millisecond && r.RetryAfter <= 100*time.Millisecond,
		"RetryAfter %v: until the bucket could hold 8 × the 92 missing, at most 100 ms, less up to half", r.RetryAfter)

	before := s.commandStats(t)
	for range 1000 {
		require.False(t, lim.Allow(key))
	}
	mock.Add(r.RetryAfter - time.Nanosecond)
	require.False(t, lim.Allow(key), "a nanosecond before RetryAfter")
	require.Empty(t, s.sentSince(t, before), "commands sent while the key waited")
	mock.Add(100*time.Millisecond - r.RetryAfter + time.Nanosecond)
	r = lim.Take(key, 1)
	require.True(t, r.Allowed, "at t0 + 100 ms: %v", r)
	require.Equal(t, 100, r.Remaining, "the lease of the 100 asked beyond this call's event")
	require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "commands sent at t0 + 100 ms")
}

// TestLeasesEndOnSetLimit: after SetLimit, no event is spent from a lease
// taken under the old limit: what the key used converts to the new limit
// (here a debt of a whole hour), and the lease's 100 events do not pass.
// The same when SetKeyLimit's function gives the key another limit.
func TestLeasesEndOnSetLimit(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	old, lower := keylimit.PerSecond(1000), keylimit.PerHour(10)
	var current atomic.Pointer[keylimit.Limit]
	current.Store(&old)
	byKey := leased(t, c, keylimit.PerMinute(1), time.Second, onMock(mock)...)
	require.NoError(t, byKey.SetKeyLimit(func(string) keylimit.Limit { return *current.Load() }))
	lim := leased(t, c, old, time.Second, onMock(mock)...)
	for name, change := range map[string]struct {
		lim    *redislimit.TokenBucket
		change func()
	}{
		"SetLimit":    {lim, func() { require.NoError(t, lim.SetLimit(lower)) }},
		"SetKeyLimit": {byKey, func() { current.Store(&lower) }},
	} {
		key := testKey(t, name)
		warm(t, change.lim, key, 100)
		require.Equal(t, 100, change.lim.Peek(key).Remaining, "%s: the lease before the change", name)
		change.change()
		r := change.lim.Take(key, 1)
		require.False(t, r.Allowed, "%s: a call after the change: %v", name, r)
		require.Zero(t, r.Remaining, "%s: a call after the change", name)
	}
}

// TestLeasesUnderFailure: while Redis fails, a live lease still admits
// exactly what it holds (its events were taken before), without an error;
// then the failure policy answers, here FailClosed. An ended context makes
// no decision, even from a lease.
func TestLeasesUnderFailure(t *testing.T) {
	s := newServer(t)
	c := quickClient(t, s)
	f := addFaults(c)
	mock := newMock()
	lim := leased(t, c, keylimit.PerSecond(1000), time.Second,
		append(onMock(mock), redislimit.WithFailurePolicy(redislimit.FailClosed()))...)
	key := testKey(t, "k")
	warm(t, lim, key, 100)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := lim.TakeContext(ctx, key, 1)
	require.False(t, r.Allowed, "a decision under an ended context: %v", r)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 100, lim.Peek(key).Remaining, "the lease after a decision under an ended context")

	f.on.Store(true)
	for i := range 100 {
		r, err := lim.TakeContext(context.Background(), key, 1)
		require.NoError(t, err, "call %d from the lease, Redis failing", i)
		require.True(t, r.Allowed, "call %d from the lease, Redis failing: %v", i, r)
	}
	r, err = lim.TakeContext(context.Background(), key, 1)
	require.False(t, r.Allowed, "after the lease, FailClosed: %v", r)
	var e *redislimit.Error
	require.True(t, errors.As(err, &e), "the error after the lease: %v", err)
}

// TestLeaseOptions: WithLeases takes a positive time, and does not apply to
// a SlidingWindow (its log would record a leased event at the time it was
// leased, not spent); a limiter with leases is not joined by keylimit.All,
// which then decides limiter by limiter, exactly: the lease gets back what a
// refusal of the other limit undid.
func TestLeaseOptions(t *testing.T) {
	c := shared.client(t)
	_, err := redislimit.NewTokenBucket(c, "x", keylimit.PerSecond(10), redislimit.WithLeases(0))
	require.ErrorContains(t, err, "redislimit: WithLeases(0s): the lease time is not positive")
	_, err = redislimit.NewSlidingWindow(c, "x", keylimit.PerSecond(10), redislimit.WithLeases(time.Second))
	require.ErrorContains(t, err, "redislimit: WithLeases does not apply to a sliding window")

	mock := newMock()
	bucket := leased(t, c, keylimit.PerSecond(1000), time.Second, onMock(mock)...)
	window, err := redislimit.NewFixedWindow(c, "x", keylimit.PerHour(3), append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	all := keylimit.All[string](bucket, window)
	require.Equal(t, fmtType(keylimit.All[string](window)), fmtType(all), "All of a leased limiter is keylimit's, not a joined one")
	key := testKey(t, "k")
	warm(t, bucket, key, 100)
	admitted := 0
	for range 5 {
		if all.Allow(key) {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "All of the lease and 3/hour")
	require.Equal(t, 97, bucket.Peek(key).Remaining, "the lease after 3 admitted and 2 given back")
}

// TestLeasedFleetHammer is the figure: three instances, each on a
// client of its own, hammer one key limited to 10,000/s for 2 s. The fleet
// admits at most burst + rate × elapsed (on Redis's clock, from before the
// first call to after the last), at least 90% of it, and Redis runs at most
// one script call per 20 events admitted, the leases' returns included.
func TestLeasedFleetHammer(t *testing.T) {
	s := newServer(t)
	l := keylimit.PerSecond(10_000)
	key := testKey(t, "hot")
	fleet := make([]*redislimit.TokenBucket, 3)
	for i := range fleet {
		fleet[i] = leased(t, s.client(t), l, 20*time.Millisecond, redislimit.WithFailurePolicy(redislimit.FailClosed()))
		pinged(t, fleet[i])
	}
	timeClient := s.client(t)
	before := s.commandStats(t)
	start := redisTime(t, timeClient)
	probe := schedprobe.Start()
	admitted := hammer(fleet, key, 2*time.Second)
	late := probe.Stop()
	end := redisTime(t, timeClient)
	for _, lim := range fleet {
		require.NoError(t, lim.Close())
	}
	sent := s.sentSince(t, before)
	calls := sent["evalsha"] + sent["eval"]
	total := admitted[0] + admitted[1] + admitted[2]
	bound := int64(l.BurstSize()) + (end-start)/int64(l.WithBurst(1).FillTime())
	t.Logf("admitted %d (%v by instance) of at most %d in %v: %.1f%%; %d script calls, one per %.0f admitted",
		total, admitted, bound, time.Duration(end-start), 100*float64(total)/float64(bound), calls, float64(total)/float64(calls))
	require.LessOrEqual(t, total, bound, "events admitted by the fleet")
	require.GreaterOrEqual(t, total, leasedFloor(bound, l, late), "events admitted by the fleet: at least 90%% of %d, less what goroutines running up to %v late could not ask", bound, late)
	require.LessOrEqual(t, 20*calls, total, "script calls (%v) for %d admitted", sent, total)
}

// TestLeasedFleetClocksApart: TestLeasedFleetHammer's fleet with clocks
// minutes apart (one 5 min ahead, one 3 min behind: each measures its lease
// time on its own clock, Redis counts on its own) admits at most the bound
// and at least 90% of it, for 1 s.
func TestLeasedFleetClocksApart(t *testing.T) {
	s := newServer(t)
	l := keylimit.PerSecond(10_000)
	key := testKey(t, "hot")
	offsets := []time.Duration{0, 5 * time.Minute, -3 * time.Minute}
	fleet := make([]*redislimit.TokenBucket, len(offsets))
	for i, off := range offsets {
		fleet[i] = leased(t, s.client(t), l, 20*time.Millisecond, redislimit.WithFailurePolicy(redislimit.FailClosed()),
			keylimit.WithClock(skewedClock{clock.NewMock(), off}))
		pinged(t, fleet[i])
	}
	timeClient := s.client(t)
	start := redisTime(t, timeClient)
	probe := schedprobe.Start()
	admitted := hammer(fleet, key, time.Second)
	late := probe.Stop()
	end := redisTime(t, timeClient)
	total := admitted[0] + admitted[1] + admitted[2]
	bound := int64(l.BurstSize()) + (end-start)/int64(l.WithBurst(1).FillTime())
	t.Logf("clocks %v apart: admitted %d (%v by instance) of at most %d: %.1f%%", offsets, total, admitted, bound, 100*float64(total)/float64(bound))
	require.LessOrEqual(t, total, bound, "events admitted by the fleet")
	require.GreaterOrEqual(t, total, leasedFloor(bound, l, late), "events admitted by the fleet: at least 90%% of %d, less what goroutines running up to %v late could not ask", bound, late)
}

// leasedFloor is the least a leased fleet hammering a key of limit l admits
// of bound: 90%, less the events that refill while the machine keeps its
// goroutines from running, up to late (measured by a schedprobe) at each of
// a few fetches in a row: a fleet that cannot ask cannot spend, and what
// refills meanwhile is left in Redis when the run ends.
func leasedFloor(bound int64, l keylimit.Limit, late time.Duration) int64 {
	lost := 4 * int64(late) / int64(l.WithBurst(1).FillTime())
	return max(9*bound/10-lost, 0)
}

// hammer calls Allow(key) on each of fleet from 4 goroutines each for about
// run, and returns what each instance admitted.
func hammer(fleet []*redislimit.TokenBucket, key string, run time.Duration) []int64 {
	counts := make([]atomic.Int64, len(fleet))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i, lim := range fleet {
		for range 4 {
			wg.Go(func() {
				n := int64(0)
				for !stop.Load() {
					if lim.Allow(key) {
						n++
					}
				}
				counts[i].Add(n)
			})
		}
	}
	time.Sleep(run)
	stop.Store(true)
	wg.Wait()
	admitted := make([]int64, len(fleet))
	for i := range counts {
		admitted[i] = counts[i].Load()
	}
	return admitted
}

// TestLeasedInstanceKilled: instance A of three loses its connection to
// Redis for good while its lease holds events, its limiter never closed.
// Those events are lost to the fleet (its sweeper cannot give them back),
// and nothing else: for a second after, the other two admit exactly what the
// bucket gives out, its refill less what is left in it at the end, which is
// at most two lease times' refill. (Cut off but alive, A would admit what
// its lease holds and no more: TestLeasesUnderFailure.)
func TestLeasedInstanceKilled(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	l := keylimit.PerSecond(1000) // one event a ms
	const d = 100 * time.Millisecond
	key := testKey(t, "k")
	fleet := make([]keylimit.Limiter[string], 3)
	clients := make([]*redis.Client, 3)
	for i := range fleet {
		clients[i] = quickClient(t, s)
		lim, err := redislimit.NewTokenBucket(clients[i], "leased", l, append(onMock(mock), redislimit.WithLeases(d),
			redislimit.WithTimeout(patient), redislimit.WithFailurePolicy(redislimit.FailClosed()),
			redislimit.WithOnError(func(error) {}))...)
		require.NoError(t, err)
		if i > 0 {
			t.Cleanup(func() { lim.Close() }) // A is never closed
		}
		fleet[i] = lim
	}
	plain, err := redislimit.NewTokenBucket(s.client(t), "leased", l, append(onMock(mock), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)

	roundRobin(fleet, key) // the burst, in leases; each fetch after it got less than it asked
	mock.Add(d)            // when each may fetch again
	held := 0
	for held == 0 {
		require.True(t, fleet[0].Allow(key), "A, fetching a lease")
		held = redislimit.LeaseHeld(fleet[0], key)
	}
	clients[0].Close()
	left := plain.Peek(key).Remaining

	after := 0
	for range 100 {
		mock.Add(10 * time.Millisecond)
		after += roundRobin(fleet[1:], key)
	}
	end := plain.Peek(key).Remaining
	t.Logf("A held %d when killed; in Redis then %d, a second later %d; B and C admitted %d", held, left, end, after)
	require.True(t, held > 0 && held <= l.BurstSize()/10, "A's lease held %d: at most a tenth of the burst", held)
	require.Equal(t, 1000+left-end, after, "what B and C admitted in the second after the kill")
	// What B and C leave: the refill of their wait after a short fetch (at
	// most d), and what a lease leaves on a bucket that holds less than
	// d's refill (it takes an eighth of that).
	require.LessOrEqual(t, end, 2*int(d/l.WithBurst(1).FillTime()), "left in Redis: at most two lease times' refill")
}

// TestLeaseEndsOnTimeWhateverTheClock pins issue 24.2: a lease's end was
// read on the local clock alone (WithClock's), which may stop or step back;
// on one instance whose clock did, a lease outlived the time Redis counted
// it for, and was spent after Redis had given the same events out again (a
// fixed window admitted 2,179 of 2,000, a bucket 175 over its bound). Now a
// lease also ends on the process's monotonic clock when the scripts decide
// on Redis time: instance A, on a mock clock that is frozen or stepped
// back, leases events, and once Redis has given the whole quota out again
// to B (a new window; a bucket full again), A's lease admits nothing.
func TestLeaseEndsOnTimeWhateverTheClock(t *testing.T) {
	t.Parallel() // most of it sleeps until a window or a lease ends
	for _, clk := range []string{"Frozen", "SteppedBack"} {
		t.Run(clk+"/FixedWindow", func(t *testing.T) {
			t.Parallel()
			const period = time.Second
			l := keylimit.Per(1000, period)
			mock := newMock()
			a, err := redislimit.NewFixedWindow(shared.client(t), "leased", l, keylimit.WithClock(mock),
				redislimit.WithLeases(period/2), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			t.Cleanup(func() { a.Close() })
			b, err := redislimit.NewFixedWindow(shared.client(t), "leased", l, redislimit.WithTimeout(patient))
			require.NoError(t, err)
			key := testKey(t, "k")
			untilBoundary(period, -10*time.Millisecond) // early in a window
			warm(t, a, key, 50)
			held := redislimit.LeaseHeld(a, key)
			if clk == "SteppedBack" {
				mock.Add(-time.Hour)
			}
			untilBoundary(period, -10*time.Millisecond) // early in the next
			window := time.Now().UnixNano() / int64(period)
			require.True(t, b.AllowN(key, 1000), "B takes the whole quota of a new window")
			na := drain(t, a, key)
			require.Equal(t, window, time.Now().UnixNano()/int64(period), "the test took longer than a window")
			t.Logf("%s clock: A held %d; in the next window B admitted 1000, A %d: %d of 1000", clk, held, na, 1000+na)
			require.Zero(t, na, "A's admissions in the window after its lease's")
		})
		t.Run(clk+"/TokenBucket", func(t *testing.T) {
			t.Parallel()
			l := keylimit.Per(1000, 500*time.Millisecond) // an event every 500 µs, full in 500 ms
			const d = 100 * time.Millisecond
			mock := newMock()
			a := leased(t, shared.client(t), l, d, keylimit.WithClock(mock))
			b, err := redislimit.NewTokenBucket(shared.client(t), "leased", l, redislimit.WithTimeout(patient))
			require.NoError(t, err)
			key := testKey(t, "k")
			warm(t, a, key, 50)
			held := redislimit.LeaseHeld(a, key)
			if clk == "SteppedBack" {
				mock.Add(-time.Hour)
			}
			time.Sleep(d + 500*time.Millisecond + 50*time.Millisecond) // the lease's end, then a full bucket
			start := time.Now()
			require.True(t, b.AllowN(key, 1000), "B takes the whole burst of a full bucket")
			na := drain(t, a, key)
			bound := 1000 + int(time.Since(start)/l.WithBurst(1).FillTime()) + 1
			t.Logf("%s clock: A held %d; B admitted 1000 of a full bucket, then A %d: %d against a bound of %d",
				clk, held, na, 1000+na, bound)
			require.LessOrEqual(t, 1000+na, bound, "admitted since B's call")
		})
	}
}

// TestLeaseRefundHasACeiling pins issue 24.3 for leases: each Refund of one
// lease Admission added its events to the lease again, so 100,000 Refunds
// of one admission minted about 100,000 events (100,823 admitted against a
// bound of about 1,034). A second Refund of an Admission now gives nothing,
// and a lease never holds more than it was granted: on a clock that stands
// still, a bucket and a fixed window of 1,000 admit at most 1,000 however
// often one admission is refunded.
func TestLeaseRefundHasACeiling(t *testing.T) {
	mock := newMock() // at the start of a minute; it stands still
	c := shared.client(t)
	bucket := leased(t, c, keylimit.PerSecond(1000), 100*time.Millisecond, onMock(mock)...)
	window, err := redislimit.NewFixedWindow(c, "leased", keylimit.PerMinute(1000),
		append(onMock(mock), redislimit.WithLeases(time.Minute), redislimit.WithTimeout(patient))...)
	require.NoError(t, err)
	t.Cleanup(func() { window.Close() })
	for _, lim := range []redisLimiter{bucket, window} {
		t.Run(fmtType(lim), func(t *testing.T) {
			key := testKey(t, "k")
			admitted := warm(t, lim, key, 50)
			held := redislimit.LeaseHeld(lim, key)
			_, a := lim.Admit(key, 1) // refunded below, so not counted
			require.Equal(t, held-1, redislimit.LeaseHeld(lim, key), "the lease after an admission from it")
			for range 100_000 {
				lim.Refund(key, a)
			}
			after := redislimit.LeaseHeld(lim, key)
			admitted += drain(t, lim, key)
			t.Logf("the lease held %d, then %d after 100,000 Refunds of one admission; %d admitted on a stopped clock, "+
				"against a bound of 1000", held, after, admitted)
			require.Equal(t, held, after, "the lease after 100,000 Refunds of one admission from it")
			require.LessOrEqual(t, admitted, 1000, "admitted on a stopped clock")
		})
	}
}

// TestLeaseLoneInstanceKeepsTheRefill: one instance that asks without pause
// on a bucket of 1,000/s with a burst of 100 and leases of 100 ms (50 ms:
// at most half the bucket's span), sleeping for each RetryAfter, on a mock
// clock for 2 s. A fetch left short waits, but comes back before the
// bucket's debt falls below the lease time: a lease counts from its end,
// and one that starts after the debt has fallen below it skips the refill
// between, which no one takes. So the instance admits the whole bound
// (burst + 1,000/s over the time passed) but for the first lease's skip (a
// full bucket has no debt: 50 ms) and what the last counted ahead of the
// end, at most 50 ms and a lease's events; waits as long as a leaseShare
// of the missing events' refill lost about a fifth.
func TestLeaseLoneInstanceKeepsTheRefill(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	lim := leased(t, s.client(t), keylimit.PerSecond(1000).WithBurst(100), 100*time.Millisecond, onMock(mock)...)
	key := testKey(t, "k")
	start := mock.Now()
	admitted, waits := 0, 0
	for mock.Now().Sub(start) < 2*time.Second {
		r := lim.Take(key, 1)
		if r.Allowed {
			admitted++
			continue
		}
		require.Positive(t, r.RetryAfter, "a refusal's RetryAfter: %v", r)
		mock.Add(r.RetryAfter)
		waits++
	}
	elapsed := mock.Now().Sub(start)
	bound := 100 + int(elapsed/time.Millisecond)
	t.Logf("admitted %d of the bound %d over %v, %d waits", admitted, bound, elapsed, waits)
	require.LessOrEqual(t, admitted, bound, "events admitted")
	require.GreaterOrEqual(t, admitted, bound-2*50-11, "events admitted: all but the first lease's skip on a full bucket and what the last counted ahead")
	require.Greater(t, waits, 20, "waits: the fetches were left short")
}

// TestLeaseRefusedKeyRemembered: a key whose fetch Redis refused is
// remembered for refusedIdle (16) lease times after it, not two, and asked
// in a lease call even for no lease. An instance takes a burst of 100 (a
// plain take: the key is new), and 30 ms later asks 100 again, a plain
// take too (what it spent in a lease time is no more), which Redis
// refuses. Asked again 300 ms later (leases of 20 ms; the sweeper run
// meanwhile), it makes a lease call, which marks it in the key's fleet set,
// so that the share rule counts and paces it, not the plain take of a rare
// key; asked 450 ms later, the key has been forgotten (320 ms after the
// refusal), and the call is a plain take, which makes no set.
func TestLeaseRefusedKeyRemembered(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	c := s.client(t)
	prefix := testKey(t, "p") + ":"
	lim := leased(t, c, keylimit.PerSecond(1000).WithBurst(100), 20*time.Millisecond, append(onMock(mock), redislimit.WithPrefix(prefix))...)
	pinged(t, lim) // the server's check (CONFIG GET) done: the counts below are the takes'
	ctx := context.Background()
	for _, tc := range []struct {
		key   string
		after time.Duration
		lease bool
	}{{"a", 300 * time.Millisecond, true}, {"b", 450 * time.Millisecond, false}} {
		set := prefix + "{" + tc.key + "}:lf" // the key's fleet (lua/bucket.lua's fleet)
		require.True(t, lim.Take(tc.key, 100).Allowed, "key %s: the burst", tc.key)
		mock.Add(30 * time.Millisecond)
		sent := s.commandStats(t)
		require.False(t, lim.Take(tc.key, 100).Allowed, "key %s: the burst again 30 ms later", tc.key)
		require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, sent), "key %s: commands sent", tc.key)
		require.Zero(t, c.Exists(ctx, set).Val(), "key %s: a fleet set after two plain takes", tc.key)
		mock.Add(tc.after)
		redislimit.SweepLeases(lim)
		require.True(t, lim.Take(tc.key, 1).Allowed, "key %s: %v later", tc.key, tc.after)
		members, err := c.ZRangeWithScores(ctx, set, 0, -1).Result()
		require.NoError(t, err)
		if tc.lease {
			require.Len(t, members, 1, "key %s: the fleet's set after the call %v after the refusal: a lease call", tc.key, tc.after)
		} else {
			require.Empty(t, members, "key %s: the fleet's set after the call %v after the refusal: a plain take", tc.key, tc.after)
		}
	}
}
