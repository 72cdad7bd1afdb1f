package keylimit_test

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestSetLimitKeepsDebtInTokens(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(10), keylimit.WithClock(clk))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("k", 10)) // owes 10 tokens: 10 s

	// Raised: the 10 tokens owed are 10 × 100 ms now, of a burst of 20.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(10).WithBurst(20)))
	require.Equal(t, keylimit.PerSecond(10).WithBurst(20), lim.Limit())
	r := lim.Peek("k")
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 20, Remaining: 10, ResetAfter: time.Second}, r)
	require.True(t, lim.AllowN("k", 10))
	require.False(t, lim.Allow("k"))
	require.Equal(t, 20, lim.Peek("new").Remaining, "a new key gets the new burst")

	// Lowered: 20 tokens owed at 1 s each, beyond the new burst of 3: the
	// key waits for 18 of them before its next event.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(1).WithBurst(3)))
	r = lim.Take("k", 1)
	require.Equal(t, keylimit.Result{Limit: 3, RetryAfter: 18 * time.Second, ResetAfter: 20 * time.Second}, r)
	clk.Add(18*time.Second - time.Nanosecond)
	require.False(t, lim.Allow("k"))
	clk.Add(time.Nanosecond)
	require.True(t, lim.Allow("k"))
}

func TestSetLimitInvalidChangesNothing(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(newFastClock()))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("k", 2))
	require.EqualError(t, lim.SetLimit(keylimit.PerMinute(0)), "keylimit: events 0 is below 1")
	require.Equal(t, keylimit.PerMinute(5), lim.Limit())
	require.Equal(t, 3, lim.Peek("k").Remaining)
}

// TestSetLimitUnderConcurrentAllow: goroutines hammer one key on a moving
// clock while the limit flips between two. Admissions never exceed the
// larger burst plus the larger rate over any interval, and -race finds no
// race.
func TestSetLimitUnderConcurrentAllow(t *testing.T) {
	a, b := keylimit.PerSecond(10).WithBurst(5), keylimit.PerSecond(2).WithBurst(20)
	maxBurst, minInterval := 20, a.Interval()
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](a, keylimit.WithClock(clk))
	require.NoError(t, err)
	defer lim.Close()
	type admission struct{ before, after time.Time }
	var (
		mu    sync.Mutex
		adms  []admission
		wg    sync.WaitGroup
		flips atomic.Int64
	)
	t0 := clk.Now()
	end := t0.Add(30 * time.Second)
	for range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i%50 == 0 {
					// Move the clock and flip the limit.
					clk.Add(time.Millisecond)
					l := a
					if flips.Add(1)%2 == 0 {
						l = b
					}
					if err := lim.SetLimit(l); err != nil {
						t.Error(err)
						return
					}
				}
				before := clk.Now()
				if before.After(end) {
					return
				}
				ok := lim.Allow("hot")
				if ok {
					mu.Lock()
					adms = append(adms, admission{before, clk.Now()})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Greater(t, flips.Load(), int64(10_000), "the limit flipped often")
	bound := func(d time.Duration) int { return maxBurst + int(d/minInterval) }
	require.LessOrEqual(t, len(adms), bound(clk.Now().Sub(t0)))
	sort.Slice(adms, func(i, j int) bool { return adms[i].before.Before(adms[j].before) })
	for i := range adms {
		for j := i; j < len(adms); j++ {
			count := 0
			for k := i; k <= j; k++ {
				if !adms[k].after.After(adms[j].after) {
					count++
				}
			}
			if d := adms[j].after.Sub(adms[i].before); count > bound(d) {
				t.Fatalf("%d admissions in %v, bound %d", count, d, bound(d))
			}
		}
	}
	t.Logf("%d admissions over %v, %d flips", len(adms), clk.Now().Sub(t0), flips.Load())
}

// tier is a per-key limit function: clients 1 and 2 on two endpoints.
func tier(foo bool) func(client string) keylimit.Limit {
	return func(client string) keylimit.Limit {
		switch {
		case client == "client-1" && foo:
			return keylimit.PerMinute(10)
		case client == "client-1":
			return keylimit.PerMinute(5)
		case client == "client-2" && foo:
			return keylimit.PerMinute(20)
		case client == "client-2":
			return keylimit.PerMinute(10)
		}
		return keylimit.Limit{} // everyone else: the limiter's own limit
	}
}

func TestKeyLimitTiers(t *testing.T) {
	clk := newFastClock()
	endpoints := map[string]*keylimit.TokenBucket[string]{}
	for name, foo := range map[string]bool{"/foo": true, "/bar": false} {
		lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(clk), keylimit.WithKeyLimit(tier(foo)))
		require.NoError(t, err)
		defer lim.Close()
		endpoints[name] = lim
	}
	want := map[string]map[string]int{
		"/foo": {"client-1": 10, "client-2": 20, "anonymous": 2},
		"/bar": {"client-1": 5, "client-2": 10, "anonymous": 2},
	}
	for ep, clients := range want {
		for client, quota := range clients {
			got := 0
			for range 50 {
				if endpoints[ep].Allow(client) {
					got++
				}
			}
			require.Equal(t, quota, got, "%s on %s", client, ep)
			require.Equal(t, quota, endpoints[ep].Peek(client).Limit)
		}
	}
	// A minute later each has its quota again.
	clk.Add(time.Minute)
	require.True(t, endpoints["/foo"].AllowN("client-2", 20))
	require.False(t, endpoints["/foo"].Allow("client-2"))
}

func TestKeyLimitInvalidIsAnErrorNotAPanic(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(clk),
		keylimit.WithKeyLimit(func(key string) keylimit.Limit {
			if key == "bad" {
				return keylimit.PerMinute(-1)
			}
			return keylimit.Limit{}
		}))
	require.NoError(t, err)
	defer lim.Close()
	r := lim.Take("bad", 1)
	require.False(t, r.Allowed)
	require.EqualError(t, r.Err, "keylimit: the limit WithKeyLimit gave this key is invalid: keylimit: events -1 is below 1")
	require.Equal(t, keylimit.InfDuration, r.RetryAfter)
	require.False(t, lim.Allow("bad"))
	require.ErrorIs(t, lim.Wait(context.Background(), "bad"), r.Err)
	require.Equal(t, r.Err, lim.Peek("bad").Err)
	require.Equal(t, 0, lim.Len(), "a key with an invalid limit is not tracked")
	require.True(t, lim.AllowN("good", 5))
	require.Nil(t, lim.Take("good", 1).Err)
}

func TestKeyLimitWrongKeyType(t *testing.T) {
	_, err := keylimit.NewTokenBucket[int](keylimit.PerMinute(5), keylimit.WithKeyLimit(func(string) keylimit.Limit { return keylimit.Limit{} }))
	require.EqualError(t, err, "keylimit: WithKeyLimit got a func(string) keylimit.Limit, but the limiter's keys are int")
	_, err = keylimit.NewTokenBucket[int](keylimit.PerMinute(5), keylimit.WithKeyLimit[int](nil))
	require.EqualError(t, err, "keylimit: WithKeyLimit(nil)")
}

func TestSetLimitReresolvesKeyLimits(t *testing.T) {
	var premium atomic.Int64
	premium.Store(10)
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(clk),
		keylimit.WithKeyLimit(func(key string) keylimit.Limit {
			if key == "premium" {
				return keylimit.PerHour(int(premium.Load()))
			}
			return keylimit.Limit{}
		}))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("premium", 10))
	require.False(t, lim.Allow("premium"))
	premium.Store(30) // an operator raises the tier...
	require.False(t, lim.Allow("premium"), "...which keys pick up at SetLimit, not before")
	require.NoError(t, lim.SetLimit(keylimit.PerHour(1)))
	r := lim.Peek("premium")
	require.Equal(t, 30, r.Limit)
	require.Equal(t, 20, r.Remaining, "the 10 owed are still owed")
}

func TestKeyLimitAllocs(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1_000_000), keylimit.WithKeyLimit(tier(true)))
	require.NoError(t, err)
	defer lim.Close()
	lim.Allow("client-1")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("client-1") }))
}

// settable is what the tests of per-key limits and SetLimit need of a
// window limiter.
type settable interface {
	keylimit.Limiter[string]
	keylimit.Refunder[string]
	SetLimit(keylimit.Limit) error
	Limit() keylimit.Limit
	Len() int
	Close() error
}

// windowType builds one window limiter type for the tests below. refill is
// how many Periods after its last admission a key has its full quota again.
type windowType struct {
	name   string
	new    func(l keylimit.Limit, opts ...keylimit.Option) (settable, error)
	refill time.Duration
}

func windowTypes() []windowType {
	return []windowType{
		{"FixedWindow", asSettable(keylimit.NewFixedWindow[string]), 1},
		{"SlidingWindow", asSettable(keylimit.NewSlidingWindow[string]), 1},
		{"SlidingCounter", asSettable(keylimit.NewSlidingCounter[string]), 2},
	}
}

func asSettable[L settable](ctor constructor[L]) func(keylimit.Limit, ...keylimit.Option) (settable, error) {
	return func(l keylimit.Limit, opts ...keylimit.Option) (settable, error) {
		lim, err := ctor(l, opts...)
		if err != nil {
			return nil, err
		}
		return lim, nil
	}
}

// make returns a limiter of l of type wt with opts, closed when the test ends.
func (wt windowType) make(t testing.TB, l keylimit.Limit, opts ...keylimit.Option) settable {
	t.Helper()
	lim, err := wt.new(l, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim
}

// TestKeyLimitTiersWindows is TestKeyLimitTiers for every window type: one
// limiter per endpoint, tiers by key; each client gets exactly its quota,
// and once the window has moved on, its quota again.
func TestKeyLimitTiersWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			mock := clock.NewMock() // on a minute boundary
			endpoints := map[string]settable{
				"/foo": wt.make(t, keylimit.PerMinute(2), keylimit.WithClock(mock), keylimit.WithKeyLimit(tier(true))),
				"/bar": wt.make(t, keylimit.PerMinute(2), keylimit.WithClock(mock), keylimit.WithKeyLimit(tier(false))),
			}
			want := map[string]map[string]int{
				"/foo": {"client-1": 10, "client-2": 20, "anonymous": 2},
				"/bar": {"client-1": 5, "client-2": 10, "anonymous": 2},
			}
			for round := range 2 {
				for ep, clients := range want {
					for client, quota := range clients {
						got := 0
						for range 50 {
							if endpoints[ep].Allow(client) {
								got++
							}
						}
						require.Equal(t, quota, got, "round %d: %s on %s", round, client, ep)
						r := endpoints[ep].Peek(client)
						require.Equal(t, quota, r.Limit)
						require.Zero(t, r.Remaining)
					}
				}
				mock.Add(wt.refill * time.Minute)
			}
		})
	}
}

func TestKeyLimitInvalidIsAnErrorNotAPanicWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			lim := wt.make(t, keylimit.PerMinute(5), keylimit.WithClock(clock.NewMock()),
				keylimit.WithKeyLimit(func(key string) keylimit.Limit {
					switch key {
					case "bad":
						return keylimit.PerMinute(-1)
					case "huge":
						return keylimit.PerHour(keylimit.MaxSlidingWindowEvents + 1)
					}
					return keylimit.Limit{}
				}))
			r := lim.Take("bad", 1)
			require.False(t, r.Allowed)
			require.EqualError(t, r.Err, "keylimit: the limit WithKeyLimit gave this key is invalid: keylimit: events -1 is below 1")
			require.Equal(t, keylimit.InfDuration, r.RetryAfter)
			require.False(t, lim.Allow("bad"))
			require.ErrorIs(t, lim.(interface {
				Wait(context.Context, string) error
			}).Wait(context.Background(), "bad"), r.Err)
			require.Equal(t, r.Err, lim.Peek("bad").Err)
			require.Equal(t, 0, lim.Len(), "a key with an invalid limit is not tracked")

			// The SlidingWindow's cap on Events holds for per-key limits.
			r = lim.Take("huge", 1)
			if wt.name == "SlidingWindow" {
				require.False(t, r.Allowed)
				require.EqualError(t, r.Err, "keylimit: the limit WithKeyLimit gave this key is invalid: keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter for large quotas")
				require.Equal(t, 0, lim.Len())
			} else {
				require.True(t, r.Allowed)
				require.Nil(t, r.Err)
			}
			require.True(t, lim.AllowN("good", 5))
			require.Nil(t, lim.Take("good", 1).Err)
		})
	}
}

func TestKeyLimitWrongKeyTypeWindows(t *testing.T) {
	wrong := keylimit.WithKeyLimit(func(string) keylimit.Limit { return keylimit.Limit{} })
	_, err := keylimit.NewFixedWindow[int](keylimit.PerMinute(5), wrong)
	require.EqualError(t, err, "keylimit: WithKeyLimit got a func(string) keylimit.Limit, but the limiter's keys are int")
	_, err = keylimit.NewSlidingWindow[int](keylimit.PerMinute(5), wrong)
	require.EqualError(t, err, "keylimit: WithKeyLimit got a func(string) keylimit.Limit, but the limiter's keys are int")
	_, err = keylimit.NewSlidingCounter[int](keylimit.PerMinute(5), wrong)
	require.EqualError(t, err, "keylimit: WithKeyLimit got a func(string) keylimit.Limit, but the limiter's keys are int")
}

// TestKeyLimitAllocsWindows: a key with its own limit costs nothing more
// per call than any other: its config is resolved once.
func TestKeyLimitAllocsWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			calls := 0
			lim := wt.make(t, keylimit.PerHour(5), keylimit.WithClock(newFastClock()),
				keylimit.WithKeyLimit(func(string) keylimit.Limit {
					calls++
					return keylimit.PerHour(keylimit.MaxSlidingWindowEvents)
				}))
			lim.Allow("client-1")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("client-1") }), "Allow")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Take("client-1", 1) }), "Take")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Peek("client-1") }), "Peek")
			require.LessOrEqual(t, calls, 2, "the function is asked when the key is first seen, not on every call")
		})
	}
}

func TestSetLimitInvalidChangesNothingWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			lim := wt.make(t, keylimit.PerMinute(5), keylimit.WithClock(clock.NewMock()))
			require.True(t, lim.AllowN("k", 2))
			require.EqualError(t, lim.SetLimit(keylimit.PerMinute(0)), "keylimit: events 0 is below 1")
			require.EqualError(t, lim.SetLimit(keylimit.Per(5, 0)), "keylimit: period 0s is not positive")
			require.Equal(t, keylimit.PerMinute(5), lim.Limit())
			require.Equal(t, 3, lim.Peek("k").Remaining)
			require.Equal(t, 5, lim.Peek("new").Limit)
		})
	}
	s, _ := newMock(t, keylimit.NewSlidingWindow[string], keylimit.PerMinute(5))
	require.EqualError(t, s.SetLimit(keylimit.PerHour(keylimit.MaxSlidingWindowEvents+1)),
		"keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter for large quotas")
	c, _ := newMock(t, keylimit.NewSlidingCounter[string], keylimit.PerMinute(5))
	require.ErrorContains(t, c.SetLimit(keylimit.PerSecond(65_536)), "keylimit: a SlidingCounter counts at most 65535 events per 1s, not 65536")
	f, _ := newMock(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(5))
	require.ErrorContains(t, f.SetLimit(keylimit.Per(4, 1)), "keylimit: a FixedWindow counts at most 3 events per 1ns, not 4")
}

// TestSetLimitReresolvesKeyLimitsWindows: a key's own limit is asked again
// at SetLimit, and the key keeps what it counted.
func TestSetLimitReresolvesKeyLimitsWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			var premium atomic.Int64
			premium.Store(10)
			lim := wt.make(t, keylimit.PerHour(1), keylimit.WithClock(clock.NewMock()),
				keylimit.WithKeyLimit(func(key string) keylimit.Limit {
					if key == "premium" {
						return keylimit.PerHour(int(premium.Load()))
					}
					return keylimit.Limit{}
				}))
			require.True(t, lim.AllowN("premium", 10))
			require.False(t, lim.Allow("premium"))
			premium.Store(30) // an operator raises the tier...
			require.False(t, lim.Allow("premium"), "...which keys pick up at SetLimit, not before")
			require.NoError(t, lim.SetLimit(keylimit.PerHour(1)))
			r := lim.Peek("premium")
			require.Equal(t, 30, r.Limit)
			require.Equal(t, 20, r.Remaining, "the 10 counted still count")
			require.True(t, lim.AllowN("premium", 20))
			require.False(t, lim.Allow("premium"))
		})
	}
}

// TestSetLimitRaisedAndLoweredWindows: with one Period, every window type
// keeps what the key counted; a raised limit gives the difference at once,
// a lowered one refuses until the events leave, and flipping back and
// forth reopens nothing.
func TestSetLimitRaisedAndLoweredWindows(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			mock := clock.NewMock() // on a minute boundary
			lim := wt.make(t, keylimit.PerMinute(10), keylimit.WithClock(mock))
			require.True(t, lim.AllowN("k", 8))
			require.NoError(t, lim.SetLimit(keylimit.PerMinute(20)))
			require.Equal(t, keylimit.PerMinute(20), lim.Limit())
			require.Equal(t, 12, lim.Peek("k").Remaining)
			require.True(t, lim.AllowN("k", 12))
			require.False(t, lim.Allow("k"))
			require.Equal(t, 20, lim.Peek("new").Remaining, "a new key has the new quota")

			for range 5 {
				require.NoError(t, lim.SetLimit(keylimit.PerMinute(5)))
				r := lim.Take("k", 1)
				require.False(t, r.Allowed)
				require.Equal(t, keylimit.Result{Limit: 5, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, r)
				require.NoError(t, lim.SetLimit(keylimit.PerMinute(20)))
				require.False(t, lim.Allow("k"), "the 20 counted still count")
			}
			mock.Add(wt.refill * time.Minute)
			require.True(t, lim.AllowN("k", 20))
			require.False(t, lim.Allow("k"))
		})
	}
}

func TestFixedWindowSetLimitRefusesUntilTheWindowEnds(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(10))
	t0 := mock.Now()
	mock.Set(t0.Add(15 * s))
	require.True(t, lim.AllowN("k", 8))
	require.NoError(t, lim.SetLimit(keylimit.PerMinute(5)))
	mock.Set(t0.Add(20 * s))
	require.Equal(t, refused(5, 0, 40*s, 40*s), lim.Take("k", 1), "8 counted, above the 5 of the new limit")
	mock.Set(t0.Add(60*s - 1))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.Add(60 * s))
	require.Equal(t, allowed(5, 0, 60*s), lim.Take("k", 5))
}

// TestFixedWindowSetLimitMovesTheWindows pins the rule for a new Period: a
// key moves to the new window that holds now, with its count if its old
// window has not ended.
func TestFixedWindowSetLimitMovesTheWindows(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(10))
	t0 := mock.Now() // on an hour boundary
	at := func(d time.Duration) { mock.Set(t0.Add(d)) }
	m := time.Minute
	at(30*m + 15*s) // in the minute [30:00, 31:00)
	for _, k := range []string{"a", "b", "c", "d"} {
		require.True(t, lim.AllowN(k, 7))
	}

	// To an hour: the minute's 7 lie in the hour [0:00, 60:00).
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	require.Equal(t, allowed(100, 93, 29*m+45*s), lim.Peek("a"))

	// To 10 s at 30:40: a's hour and b's minute have not ended: their 7
	// come along into [30:40, 30:50). c, first asked at 31:30, counted its 7
	// in a minute that has ended.
	at(30*m + 40*s)
	require.NoError(t, lim.SetLimit(keylimit.Per(10, 10*s)))
	require.Equal(t, allowed(10, 3, 10*s), lim.Peek("a"))
	require.Equal(t, allowed(10, 3, 10*s), lim.Peek("b"))
	at(31*m + 30*s)
	require.Equal(t, allowed(10, 10, 0), lim.Peek("c"))

	// From an hour to a minute: the hour's count refuses until the minute
	// in which the key moved ends, not beyond.
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	require.True(t, lim.AllowN("d", 100), "d's minute ended at 31:00")
	require.False(t, lim.Allow("d"))
	require.NoError(t, lim.SetLimit(keylimit.PerMinute(10)))
	require.Equal(t, refused(10, 0, 30*s, 30*s), lim.Take("d", 1), "100 counted in the minute [31:00, 32:00)")
	at(32*m - 1)
	require.False(t, lim.Allow("d"))
	at(32 * m)
	require.True(t, lim.AllowN("d", 10))
}

func TestSlidingWindowSetLimitKeepsTheTimes(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingWindow[string], keylimit.Per(4, 10*s))
	t0 := mock.Now()
	at := func(d time.Duration) { mock.Set(t0.Add(d)) }
	at(1 * s)
	require.True(t, lim.Allow("k"))
	at(2 * s)
	require.True(t, lim.Allow("k"))
	at(3 * s)
	require.True(t, lim.AllowN("k", 2)) // entries at 1, 2, 3 and 3 s

	// Raised: the 4 entries stay, 2 more fit at once.
	require.NoError(t, lim.SetLimit(keylimit.Per(6, 10*s)))
	require.Equal(t, allowed(6, 2, 10*s), lim.Peek("k"))

	// Lowered to 2: the newest 2 entries, at 3 s, decide: 1 fits at 13 s.
	require.NoError(t, lim.SetLimit(keylimit.Per(2, 10*s)))
	at(4 * s)
	require.Equal(t, refused(2, 0, 9*s, 9*s), lim.Take("k", 1))

	// Raised back to 4: the 2 entries the small log had no room for come
	// back at 3 s, later than they came (1 and 2 s): nothing fits before
	// 13 s, where without them 1 would at 11 s, 2 at 12 s.
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 10*s)))
	at(11 * s)
	require.Equal(t, refused(4, 0, 2*s, 2*s), lim.Take("k", 1))
	at(13 * s)
	require.Equal(t, allowed(4, 0, 10*s), lim.Take("k", 4))

}

func TestSlidingWindowSetLimitNewPeriod(t *testing.T) {
	// A new Period judges the same times; a key idle under its old limit
	// starts afresh.
	lim, mock := newMock(t, keylimit.NewSlidingWindow[string], keylimit.Per(4, 10*s))
	t0 := mock.Now()
	mock.Set(t0.Add(3 * s))
	require.True(t, lim.AllowN("k", 4))
	mock.Set(t0.Add(7 * s))
	require.True(t, lim.AllowN("q", 4))
	mock.Set(t0.Add(9 * s))
	require.Equal(t, refused(4, 0, 4*s, 4*s), lim.Peek("k"), "4 in the window (−1 s, 9 s]")
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 5*s)))
	require.Equal(t, allowed(4, 4, 0), lim.Peek("k"), "none in the window (4 s, 9 s]")
	require.Equal(t, refused(4, 0, 3*s, 3*s), lim.Peek("q"), "q's 4 at 7 s are in it")
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 10*s)))
	require.Equal(t, refused(4, 0, 8*s, 8*s), lim.Peek("q"), "q kept its times")
	require.Equal(t, allowed(4, 4, 0), lim.Peek("k"),
		"k was idle under its last limit, which the evictor could have forgotten: it starts afresh")
}

func TestSlidingCounterSetLimitKeepsTheCounts(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingCounter[string], keylimit.PerMinute(10))
	t0 := mock.Now()
	m := time.Minute
	at := func(d time.Duration) { mock.Set(t0.Add(d)) }
	at(29*m + 30*s)
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, lim.AllowN(k, 5)) // the previous window's 5
	}
	at(30*m + 15*s)
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, lim.AllowN(k, 3)) // and the current one's 3
	}
	// One Period: the same counts, against 20: 5 × 45/60 + 3 = 6.75.
	require.NoError(t, lim.SetLimit(keylimit.PerMinute(20)))
	require.Equal(t, allowed(20, 13, 105*s), lim.Peek("a"))

	// To 2 minutes at 30:15: the window [30:00, 32:00) holds the minute of
	// the 3; the minute of the 5 ended at 30:00, inside the 2 minutes
	// before: 5 × 105/120 + 3 = 7.375.
	require.NoError(t, lim.SetLimit(keylimit.Per(20, 2*m)))
	require.Equal(t, allowed(20, 12, 225*s), lim.Peek("b"))
	// To an hour: the 3 of the minute that has not ended are the hour's
	// current count; the 5 of the minute before, which ended inside the
	// hour, weigh as its previous count: 5 × 29:45/60:00 = 2.48, rounded
	// up to 3.
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	require.Equal(t, allowed(100, 94, 89*m+45*s), lim.Peek("a"))
	// To 10 s: the window [30:10, 30:20) lies in a's hour and in c's
	// minute, whose 3 come along; the windows before them ended before the
	// window before [30:10, 30:20) began.
	require.NoError(t, lim.SetLimit(keylimit.Per(10, 10*s)))
	require.Equal(t, allowed(10, 7, 15*s), lim.Peek("a"))
	require.Equal(t, allowed(10, 7, 15*s), lim.Peek("c"))
}

// timedAdmission is one admitted call, with the clock read before and after
// it in ns since the Unix epoch: it was decided at a time in between.
type timedAdmission struct{ before, after int64 }

// hammerWhileFlipping has 8 goroutines call Allow on one key of lim, on
// clk, each moving clk by step and flipping lim's limit between a and b
// every 50 calls, until clk has moved span. It returns the admissions,
// sorted by before.
func hammerWhileFlipping(t *testing.T, lim settable, clk *fastClock, a, b keylimit.Limit, step, span time.Duration) []timedAdmission {
	t.Helper()
	var (
		mu    sync.Mutex
		adms  []timedAdmission
		wg    sync.WaitGroup
		flips atomic.Int64
	)
	end := clk.Now().Add(span).UnixNano()
	for range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i%50 == 0 {
					clk.Add(step)
					l := a
					if flips.Add(1)%2 == 0 {
						l = b
					}
					if err := lim.SetLimit(l); err != nil {
						t.Error(err)
						return
					}
				}
				before := clk.Now().UnixNano()
				if before > end {
					return
				}
				if lim.Allow("hot") {
					after := clk.Now().UnixNano()
					mu.Lock()
					adms = append(adms, timedAdmission{before, after})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Greater(t, flips.Load(), int64(5_000), "the limit flipped often")
	sort.Slice(adms, func(i, j int) bool { return adms[i].before < adms[j].before })
	t.Logf("%d admissions over %v, %d flips", len(adms), span, flips.Load())
	return adms
}

// checkBoundaryBound checks the bound of a FixedWindow (and a
// SlidingCounter) across changes of limit: in any interval, at most most
// events times one more than the number of window boundaries of the grids
// of periods inside it. An admission counts in an interval between two
// boundaries if both its clock readings are inside; the bound is checked on
// every such interval.
func checkBoundaryBound(t *testing.T, adms []timedAdmission, most int, periods ...time.Duration) {
	t.Helper()
	require.NotEmpty(t, adms)
	first, last := adms[0].before, adms[0].after
	for _, a := range adms {
		last = max(last, a.after)
	}
	// Every boundary of every grid in [first, last], and one on each side.
	var bounds []int64
	for _, p := range periods {
		for b := first - first%int64(p); b <= last+int64(p); b += int64(p) {
			bounds = append(bounds, b)
		}
	}
	sort.Slice(bounds, func(i, j int) bool { return bounds[i] < bounds[j] })
	bounds = compactInt64(bounds)
	segment := func(at int64) int { return sort.Search(len(bounds), func(i int) bool { return bounds[i] > at }) - 1 }
	for u := range bounds {
		// perEnd[v]: admissions within [bounds[u], bounds[v+1]) that end in
		// segment v.
		perEnd := make([]int, len(bounds))
		for _, a := range adms {
			if a.before >= bounds[u] {
				perEnd[segment(a.after)]++
			}
		}
		in := 0
		for v := u; v < len(bounds); v++ {
			in += perEnd[v]
			if bound := most * (1 + v - u); in > bound {
				t.Fatalf("%d admissions from %d ns to the segment after %d ns, across %d boundaries: bound %d", in, bounds[u], bounds[v], v-u, bound)
			}
		}
	}
}

func compactInt64(s []int64) []int64 {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// checkSlidingBound checks a SlidingWindow's bound across changes of limit:
// at most most admissions in any interval (t − period, t]. For each
// admission, the ones whose readings both lie in the period up to its end
// are counted.
func checkSlidingBound(t *testing.T, adms []timedAdmission, most int, period time.Duration) {
	t.Helper()
	byAfter := append([]timedAdmission(nil), adms...)
	sort.Slice(byAfter, func(i, j int) bool { return byAfter[i].after < byAfter[j].after })
	for _, a := range byAfter {
		from := a.after - int64(period)
		hi := sort.Search(len(byAfter), func(i int) bool { return byAfter[i].after > a.after })
		in := 0
		for k := hi - 1; k >= 0 && byAfter[k].after > from; k-- {
			if byAfter[k].before > from {
				in++
			}
		}
		if in > most {
			t.Fatalf("%d admissions in (%d, %d]: bound %d", in, from, a.after, most)
		}
	}
}

// TestSetLimitUnderConcurrentAllowWindows is TestSetLimitUnderConcurrentAllow
// for the window types: goroutines hammer one key on a moving clock while
// the limit flips between two, and every admission keeps the type's bound
// across changes (see each SetLimit). -race finds no race.
func TestSetLimitUnderConcurrentAllowWindows(t *testing.T) {
	const step, span = 200 * time.Microsecond, 3 * time.Second
	// Each type flips between two limits of one Period, and between two
	// of different Periods; the log of a SlidingWindow so shrinks to 3 or
	// 4 entries and grows back to 10 thousands of times.
	flips := []struct {
		name string
		a, b keylimit.Limit
	}{
		{"Events", keylimit.Per(10, 100*ms), keylimit.Per(3, 100*ms)},
		{"Period", keylimit.Per(10, 70*ms), keylimit.Per(4, 110*ms)},
	}
	types := []struct {
		name  string
		new   func(t *testing.T, l keylimit.Limit, c *fastClock) settable
		check func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit)
	}{
		{"FixedWindow", newSettableAt(keylimit.NewFixedWindow[string]), checkBoundaryBounds},
		{"SlidingCounter", newSettableAt(keylimit.NewSlidingCounter[string]), checkBoundaryBounds},
		{"SlidingWindow", newSettableAt(keylimit.NewSlidingWindow[string]), func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit) {
			// At most the larger Events in any interval of the shorter Period.
			checkSlidingBound(t, adms, max(a.Events, b.Events), min(a.Period, b.Period))
		}},
	}
	for _, typ := range types {
		for _, f := range flips {
			t.Run(typ.name+"/"+f.name, func(t *testing.T) {
				clk := newFastClock()
				lim := typ.new(t, f.a, clk)
				typ.check(t, hammerWhileFlipping(t, lim, clk, f.a, f.b, step, span), f.a, f.b)
			})
		}
	}
}

// checkBoundaryBounds is checkBoundaryBound for flips between a and b: at
// most the larger Events per window boundary of either grid, plus one.
func checkBoundaryBounds(t *testing.T, adms []timedAdmission, a, b keylimit.Limit) {
	checkBoundaryBound(t, adms, max(a.Events, b.Events), a.Period, b.Period)
}

// newSettableAt adapts a constructor to make a limiter on a fastClock,
// closed when the test ends.
func newSettableAt[L settable](ctor constructor[L]) func(*testing.T, keylimit.Limit, *fastClock) settable {
	return func(t *testing.T, l keylimit.Limit, c *fastClock) settable { return newFrozenAt(t, ctor, l, c) }
}

// TestResetForgetsAcrossMoves: Reset racing with the moves a change of
// limit makes (other goroutines flip the limit and Peek the key, which
// moves it) still forgets the key: after each Reset the key has its whole
// quota. A Reset that retired a state just moved, and not the state it
// moved to, would leave the count behind.
func TestResetForgetsAcrossMoves(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			l := keylimit.PerHour(5)
			lim := wt.make(t, l, keylimit.WithClock(newFastClock()))
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for !stop.Load() {
						if err := lim.SetLimit(l); err != nil {
							t.Error(err)
							return
						}
						lim.Peek("k")
					}
				})
			}
			for round := range 50_000 {
				if !lim.AllowN("k", 5) {
					stop.Store(true)
					wg.Wait()
					t.Fatalf("round %d: the quota was not whole after Reset", round)
				}
				lim.Reset("k")
			}
			stop.Store(true)
			wg.Wait()
			require.Equal(t, 0, lim.Len())
		})
	}
}

// TestAllRefundsAcrossMoves: many goroutines through All on a frozen
// clock, the window first, a tighter bucket second, so that the window
// gives back what the bucket refuses, while other goroutines move the
// window's key to new limits. The window ends charged with exactly what was
// admitted: no refund is lost to a move, none counted twice.
func TestAllRefundsAcrossMoves(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			clk := newFastClock()
			loose := keylimit.PerHour(keylimit.MaxSlidingWindowEvents)
			window := wt.make(t, loose, keylimit.WithClock(clk))
			tight := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(3000))[0]
			lim := keylimit.All[string](window, tight)
			var stop atomic.Bool
			var movers, callers sync.WaitGroup
			movers.Go(func() {
				for !stop.Load() {
					if err := window.SetLimit(loose); err != nil {
						t.Error(err)
						return
					}
					window.Peek("hot")
				}
			})
			var admitted atomic.Int64
			for range 16 {
				callers.Go(func() {
					for range 1000 {
						if lim.Allow("hot") {
							admitted.Add(1)
						}
					}
				})
			}
			callers.Wait()
			stop.Store(true)
			movers.Wait()
			require.EqualValues(t, 3000, admitted.Load())
			require.Equal(t, loose.Events-3000, window.Peek("hot").Remaining)
		})
	}
}

// TestStaleKeysAreEvicted: a key that is never asked again after SetLimit
// stays under its old limit, and is forgotten once idle under it.
func TestStaleKeysAreEvicted(t *testing.T) {
	for _, wt := range windowTypes() {
		t.Run(wt.name, func(t *testing.T) {
			mock := clock.NewMock()
			lim := wt.make(t, keylimit.Per(2, 10*s), keylimit.WithClock(mock), keylimit.WithEvictionInterval(time.Millisecond))
			require.True(t, lim.AllowN("k", 2))
			require.NoError(t, lim.SetLimit(keylimit.Per(2, time.Hour)))
			mock.Add(wt.refill*10*s - 1)
			time.Sleep(30 * time.Millisecond) // some 30 sweeps
			require.Equal(t, 1, lim.Len(), "not idle yet under its own limit")
			mock.Add(1)
			require.Eventually(t, func() bool { return lim.Len() == 0 }, 5*time.Second, time.Millisecond,
				"idle under the limit it is under, not the new one")
		})
	}
}
