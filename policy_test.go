package keylimit_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// The limit each key is under: SetKeyLimit, and SetLimit moving keys to a
// new limit. What SetLimit does to one type's state (a bucket's debt, a
// window's count) is tested in that type's file; the limitertest suite
// checks what every type keeps across SetLimit.

// keyLimiter is a limiter whose keys can have limits of their own: every
// rate limiter type.
type keyLimiter interface {
	SetKeyLimit(func(key string) keylimit.Limit) error
}

// keyed gives lim's keys their limits from f, as a caller does right after
// the constructor, and returns lim.
func keyed(t testing.TB, lim limiter, f func(key string) keylimit.Limit) limiter {
	t.Helper()
	require.NoError(t, lim.(keyLimiter).SetKeyLimit(f))
	return lim
}

// SetKeyLimit's function has the limiter's key type: a function of other
// keys does not compile.
var (
	_ func(*keylimit.TokenBucket[int], func(int) keylimit.Limit) error    = (*keylimit.TokenBucket[int]).SetKeyLimit
	_ func(*keylimit.FixedWindow[int], func(int) keylimit.Limit) error    = (*keylimit.FixedWindow[int]).SetKeyLimit
	_ func(*keylimit.SlidingWindow[int], func(int) keylimit.Limit) error  = (*keylimit.SlidingWindow[int]).SetKeyLimit
	_ func(*keylimit.SlidingCounter[int], func(int) keylimit.Limit) error = (*keylimit.SlidingCounter[int]).SetKeyLimit
)

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

// TestKeyLimitTiers: one limiter per endpoint, tiers by key; each client
// gets exactly its quota, and once the key's quota is whole again, its quota
// again.
func TestKeyLimitTiers(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			mock := clock.NewMock() // on a minute boundary
			endpoints := map[string]limiter{
				"/foo": keyed(t, k.make(t, keylimit.PerMinute(2), keylimit.WithClock(mock)), tier(true)),
				"/bar": keyed(t, k.make(t, keylimit.PerMinute(2), keylimit.WithClock(mock)), tier(false)),
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
				mock.Add(k.refill * time.Minute)
			}
		})
	}
}

func TestKeyLimitInvalidIsAnErrorNotAPanic(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim, _ := k.mock(t, keylimit.PerMinute(5))
			keyed(t, lim, func(key string) keylimit.Limit {
				switch key {
				case "bad":
					return keylimit.PerMinute(-1)
				case "huge":
					return keylimit.PerHour(keylimit.MaxSlidingWindowEvents + 1)
				}
				return keylimit.Limit{}
			})
			r := lim.Take("bad", 1)
			require.False(t, r.Allowed)
			require.EqualError(t, r.Err, "keylimit: the per-key limit function gave this key an invalid limit: keylimit: events -1 is below 1")
			require.Equal(t, keylimit.InfDuration, r.RetryAfter)
			require.False(t, lim.Allow("bad"))
			require.ErrorIs(t, lim.Wait(context.Background(), "bad"), r.Err)
			require.Equal(t, r.Err, lim.Peek("bad").Err)
			require.Equal(t, 0, lim.Stats().Keys, "a key with an invalid limit is not tracked")

			// The SlidingWindow's cap on Events holds for per-key limits.
			r = lim.Take("huge", 1)
			if k == slidingWindow {
				require.False(t, r.Allowed)
				require.EqualError(t, r.Err, "keylimit: the per-key limit function gave this key an invalid limit: keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter for large quotas")
				require.Equal(t, 0, lim.Stats().Keys)
			} else {
				require.True(t, r.Allowed)
				require.Nil(t, r.Err)
			}
			require.True(t, lim.AllowN("good", 5))
			require.Nil(t, lim.Take("good", 1).Err)
		})
	}
}

// TestKeyLimitAllocs: a key with its own limit costs nothing more per call
// than any other: its limit is resolved once.
func TestKeyLimitAllocs(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			calls := 0
			lim := keyed(t, k.on(t, newFastClock(), keylimit.PerHour(5)), func(string) keylimit.Limit {
				calls++
				return keylimit.PerHour(keylimit.MaxSlidingWindowEvents)
			})
			lim.Allow("client-1")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("client-1") }), "Allow")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Take("client-1", 1) }), "Take")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Peek("client-1") }), "Peek")
			require.LessOrEqual(t, calls, 2, "the function is asked when the key is first seen, not on every call")
		})
	}
}

// TestSetLimitErrors: an invalid limit, or one the type cannot hold, is an
// error that says what is wrong, and changes nothing.
func TestSetLimitErrors(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			invalid := []struct {
				limit keylimit.Limit
				err   string
			}{
				{keylimit.PerMinute(0), "keylimit: events 0 is below 1"},
				{keylimit.Per(5, 0), "keylimit: period 0s is not positive"},
			}
			switch k {
			case slidingWindow:
				invalid = append(invalid, struct {
					limit keylimit.Limit
					err   string
				}{keylimit.PerHour(keylimit.MaxSlidingWindowEvents + 1), "keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter for large quotas"})
			case slidingCounter:
				invalid = append(invalid, struct {
					limit keylimit.Limit
					err   string
				}{keylimit.PerSecond(65_536), "keylimit: a SlidingCounter counts at most 65535 events per 1s, not 65536: use a longer Period, or a FixedWindow or TokenBucket"})
			case fixedWindow:
				invalid = append(invalid, struct {
					limit keylimit.Limit
					err   string
				}{keylimit.Per(4, 1), "keylimit: a FixedWindow counts at most 3 events per 1ns, not 4"})
			}
			lim, _ := k.mock(t, keylimit.PerMinute(5))
			require.True(t, lim.AllowN("k", 2))
			for _, tt := range invalid {
				require.EqualError(t, lim.SetLimit(tt.limit), tt.err)
				require.Equal(t, keylimit.PerMinute(5), lim.Limit())
				require.Equal(t, 3, lim.Peek("k").Remaining)
				require.Equal(t, 5, lim.Peek("new").Limit)
			}
		})
	}
}

// TestSetLimitReresolvesKeyLimits: a key's own limit is asked again at
// SetLimit, and the key keeps what it used.
func TestSetLimitReresolvesKeyLimits(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var premium atomic.Int64
			premium.Store(10)
			lim, _ := k.mock(t, keylimit.PerHour(1))
			keyed(t, lim, func(key string) keylimit.Limit {
				if key == "premium" {
					return keylimit.PerHour(int(premium.Load()))
				}
				return keylimit.Limit{}
			})
			require.True(t, lim.AllowN("premium", 10))
			require.False(t, lim.Allow("premium"))
			premium.Store(30) // an operator raises the tier...
			require.False(t, lim.Allow("premium"), "...which keys pick up at SetLimit, not before")
			require.NoError(t, lim.SetLimit(keylimit.PerHour(1)))
			r := lim.Peek("premium")
			require.Equal(t, 30, r.Limit)
			require.Equal(t, 20, r.Remaining, "the 10 used still count")
			require.True(t, lim.AllowN("premium", 20))
			require.False(t, lim.Allow("premium"))
		})
	}
}

// TestSetLimitUnderConcurrentAllow: goroutines hammer one key on a moving
// clock while the limit flips between two, and every admission keeps the
// type's bound across changes (see each SetLimit). -race finds no race.
// Each window type flips between two limits of one Period, and between two
// of different Periods; the log of a SlidingWindow so shrinks to 3 or 4
// entries and grows back to 10 thousands of times.
func TestSetLimitUnderConcurrentAllow(t *testing.T) {
	// The windows hammer for 1.5 s of fake time (3 s under -full), in steps
	// of 200 µs; the bucket for ten times as long, in steps of 1 ms.
	span := time.Duration(sized(1500, 3000)) * time.Millisecond
	bucket := func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit) {
		// At most the larger burst plus the faster rate over any interval.
		checkBucketBound(t, adms, max(a.BurstSize(), b.BurstSize()), min(a.WithBurst(1).FillTime(), b.WithBurst(1).FillTime()))
	}
	boundaries := func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit) {
		// At most the larger Events per window boundary of either grid,
		// plus one.
		checkBoundaryBound(t, adms, max(a.Events, b.Events), a.Period, b.Period)
	}
	sliding := func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit) {
		// At most the larger Events in any interval of the shorter Period.
		checkSlidingBound(t, adms, max(a.Events, b.Events), min(a.Period, b.Period))
	}
	windowFlips := []struct {
		name string
		a, b keylimit.Limit
	}{
		{"Events", keylimit.Per(10, 100*ms), keylimit.Per(3, 100*ms)},
		{"Period", keylimit.Per(10, 70*ms), keylimit.Per(4, 110*ms)},
	}
	type row struct {
		name       string
		kind       *kind
		a, b       keylimit.Limit
		step, span time.Duration // the clock moves by step at each flip, until it has moved span
		flips      int64         // at least
		check      func(t *testing.T, adms []timedAdmission, a, b keylimit.Limit)
	}
	rows := []row{{"TokenBucket/Burst", tokenBucket, keylimit.PerSecond(10).WithBurst(5), keylimit.PerSecond(2).WithBurst(20), time.Millisecond, 10 * span, 10_000, bucket}}
	for _, f := range windowFlips {
		const step = 200 * time.Microsecond
		rows = append(rows,
			row{"FixedWindow/" + f.name, fixedWindow, f.a, f.b, step, span, 5_000, boundaries},
			row{"SlidingCounter/" + f.name, slidingCounter, f.a, f.b, step, span, 5_000, boundaries},
			row{"SlidingWindow/" + f.name, slidingWindow, f.a, f.b, step, span, 5_000, sliding})
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			clk := newFastClock()
			lim := r.kind.on(t, clk, r.a)
			var n atomic.Int64
			flip := func() error {
				if n.Add(1)%2 == 0 {
					return lim.SetLimit(r.b)
				}
				return lim.SetLimit(r.a)
			}
			adms, steps := hammer(t, lim, clk, 8, 50, r.step, r.span, flip)
			require.Greater(t, steps, r.flips, "the limit flipped often")
			require.NotEmpty(t, adms)
			t.Logf("%d admissions over %v, %d flips", len(adms), r.span, steps)
			r.check(t, adms, r.a, r.b)
		})
	}
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
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
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
			require.LessOrEqual(t, in, most*(1+v-u), "admissions from %d ns to the segment after %d ns, across %d boundaries", bounds[u], bounds[v], v-u)
		}
	}
}

// TestResetForgetsAcrossMoves: Reset racing with the moves a change of
// limit makes (other goroutines flip the limit and Peek the key, which
// moves it) still forgets the key: after each Reset the key has its whole
// quota. A Reset that retired a state just moved, and not the state it
// moved to, would leave the count behind. 10,000 rounds (50,000 under
// -full).
func TestResetForgetsAcrossMoves(t *testing.T) {
	rounds := sized(10_000, 50_000)
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			l := keylimit.PerHour(5)
			lim := k.on(t, newFastClock(), l)
			var stop atomic.Bool
			var setErrs atomic.Int64
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for !stop.Load() {
						if lim.SetLimit(l) != nil {
							setErrs.Add(1)
						}
						lim.Peek("k")
					}
				})
			}
			whole := 0
			for range rounds {
				if lim.AllowN("k", 5) {
					whole++
				}
				lim.Reset("k")
			}
			stop.Store(true)
			wg.Wait()
			require.Zero(t, setErrs.Load(), "SetLimit errors")
			require.Equal(t, rounds, whole, "rounds in which the quota was whole after Reset")
			require.Equal(t, 0, lim.Stats().Keys)
		})
	}
}

// TestStaleKeysAreEvicted: a key that is never asked again after SetLimit
// stays under its old limit, and is forgotten once idle under it.
func TestStaleKeysAreEvicted(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			mock := clock.NewMock()
			lim := k.make(t, keylimit.Per(2, 10*s), keylimit.WithClock(mock), keylimit.WithEvictionInterval(time.Millisecond))
			require.True(t, lim.AllowN("k", 2))
			require.NoError(t, lim.SetLimit(keylimit.Per(2, time.Hour)))
			mock.Add(k.refill*10*s - 1)
			time.Sleep(30 * time.Millisecond) // some 30 sweeps
			require.Equal(t, 1, lim.Stats().Keys, "not idle yet under its own limit")
			mock.Add(1)
			waitFor(t, "the key to be forgotten: idle under the limit it is under, not the new one", func() bool { return lim.Stats().Keys == 0 })
		})
	}
}

// TestSetKeyLimit: per-key limits given after construction, checked by the
// compiler, move every key to its tier on its next call, keeping what it
// used; nil puts every key back under the limiter's own limit.
func TestSetKeyLimit(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim, _ := k.mock(t, keylimit.PerHour(4))
			setter := lim.(keyLimiter)
			require.True(t, lim.AllowN("gold", 3))
			require.True(t, lim.AllowN("free", 3))
			require.NoError(t, setter.SetKeyLimit(func(key string) keylimit.Limit {
				if key == "gold" {
					return keylimit.PerHour(8)
				}
				return keylimit.Limit{} // the limiter's own
			}))
			require.Equal(t, 5, lim.Peek("gold").Remaining, "gold keeps its 3 under 8")
			require.Equal(t, 1, lim.Peek("free").Remaining, "free keeps its 3 under 4")
			require.Equal(t, 4, lim.Peek("new").Remaining, "a new key is under the limiter's own")
			require.NoError(t, setter.SetKeyLimit(nil))
			require.Equal(t, 1, lim.Peek("gold").Remaining, "gold is under the limiter's 4 again, keeping its 3")
			require.Equal(t, keylimit.PerHour(4), lim.Limit())
		})
	}
}

// TestLimitOf: each key's own limit, as httplimit's RateLimit-Policy needs
// it, without creating the key.
func TestLimitOf(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim := keyed(t, k.make(t, keylimit.PerHour(4)), tier(true))
			lo := lim.(interface{ LimitOf(string) keylimit.Limit })
			require.Equal(t, keylimit.PerMinute(10), lo.LimitOf("client-1"))
			require.Equal(t, keylimit.PerMinute(20), lo.LimitOf("client-2"))
			require.Equal(t, keylimit.PerHour(4), lo.LimitOf("someone"), "the limiter's own")
			require.Zero(t, lim.Stats().Keys, "LimitOf creates no key")
		})
	}
}
