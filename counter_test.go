package keylimit_test

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestSlidingCounterSteps(t *testing.T) {
	// 10 a minute; the mock clock starts on a window boundary.
	lim, mock := slidingCounter.mock(t, keylimit.PerMinute(10))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(10, 10, 0)},
		// 10 now weigh on this window and on the whole next one.
		{0, "take", "a", 10, allowed(10, 0, 2*time.Minute)},
		// 1 more fits when 10 × (60 s − e)/60 s <= 9 in the next window:
		// e = 6 s.
		{0, "take", "a", 1, refused(10, 0, 66*s, 2*time.Minute)},
		{30 * s, "peek", "a", 0, refused(10, 0, 36*s, 90*s)},
		{30 * s, "take", "b", 4, allowed(10, 6, 90*s)}, // keys are independent
		{66*s - 1, "take", "a", 1, refused(10, 0, 1, 54*s+1)},
		{66 * s, "take", "a", 1, allowed(10, 0, 114*s)},
		// At 90 s the previous 10 weigh 5: 4 more fit, exactly.
		{90 * s, "peek", "a", 0, allowed(10, 4, 90*s)},
		{90 * s, "take", "a", 4, allowed(10, 0, 90*s)},
		// 1 more: 10 × (60 s − e)/60 s + 5 + 1 <= 10 at e = 36 s.
		{90 * s, "take", "a", 1, refused(10, 0, 6*s, 90*s)},
		{90 * s, "take", "a", 11, refused(10, 0, keylimit.InfDuration, 90*s)},
		{90 * s, "take", "a", 0, allowed(10, 0, 90*s)},
		// In the window of 120 s, the 5 of the window of 60 s weigh fully,
		// then fade (2.5 at 150 s, rounded up to 3) to nothing at 180 s.
		{120 * s, "peek", "a", 0, allowed(10, 5, 60*s)},
		{150 * s, "peek", "a", 0, allowed(10, 7, 30*s)},
		{180 * s, "peek", "a", 0, allowed(10, 10, 0)},
		{180 * s, "take", "a", 10, allowed(10, 0, 2*time.Minute)},
		{180 * s, "reset", "a", 0, keylimit.Result{}},
		{180 * s, "peek", "a", 0, allowed(10, 10, 0)},
		{180 * s, "peek", "never-seen", 0, allowed(10, 10, 0)},
	})
	require.Equal(t, 1, lim.Stats().Keys, "b: a was reset, and peeks create no key")
}

// TestSlidingCounterRefundWeighs: a refund comes off the count of the
// window its events were admitted in: the current count, or the previous
// one, which weighs only in part, and nothing once that has faded.
func TestSlidingCounterRefundWeighs(t *testing.T) {
	lim, mock := slidingCounter.mock(t, keylimit.PerMinute(4))
	runSteps(t, lim, mock, []step{
		{0, "admit", "k", 3, verdict(true)},
		{time.Minute, "take", "k", 0, allowed(4, 1, time.Minute)}, // the 3 are now the previous window's
		{90 * s, "admit", "k", 2, verdict(true)},                  // 3 × 1/2 = 1.5, rounded up to 2, + 2 = 4
		{90 * s, "refund", "k", 1, keylimit.Result{}},             // the 2 of this window
		{90 * s, "peek", "k", 0, allowed(4, 2, 30*s)},
		{90 * s, "refund", "k", 2, keylimit.Result{}}, // the 3 of the previous window
		{90 * s, "peek", "k", 0, allowed(4, 4, 0)},
		// A refund after the count has faded gives back nothing.
		{3 * time.Minute, "admit", "k", 4, verdict(true)},
		{4 * time.Minute, "admit", "k", 1, verdict(false)}, // the 4 weigh fully at the start of the next window
		{6 * time.Minute, "admit", "k", 4, verdict(true)},
		{6 * time.Minute, "refund", "k", 2, keylimit.Result{}}, // the 4 of 3 min: faded
		{6 * time.Minute, "admit", "k", 1, verdict(false)},
	})
}

func TestSlidingCounterSetLimitKeepsTheCounts(t *testing.T) {
	lim, mock := slidingCounter.mock(t, keylimit.PerMinute(10))
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
	// 14 left once 5 × (60 − elapsed)/60 is 3, 9 s on.
	require.Equal(t, refilled(allowed(20, 13, 105*s), 9*s), lim.Peek("a"))

	// To 2 minutes at 30:15: the window [30:00, 32:00) holds the minute of
	// the 3; the minute of the 5 ended at 30:00, inside the 2 minutes
	// before: 5 × 105/120 + 3 = 7.375.
	require.NoError(t, lim.SetLimit(keylimit.Per(20, 2*m)))
	require.Equal(t, refilled(allowed(20, 12, 225*s), 9*s), lim.Peek("b"))
	// To an hour: the 3 of the minute that has not ended are the hour's
	// current count; the 5 of the minute before, which ended inside the
	// hour, weigh as its previous count: 5 × 29:45/60:00 = 2.48, rounded
	// up to 3.
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	// 95 left once 5 × (60:00 − elapsed)/60:00 is 2, at 36:00.
	require.Equal(t, refilled(allowed(100, 94, 89*m+45*s), 5*m+45*s), lim.Peek("a"))
	// To 10 s: the window [30:10, 30:20) lies in a's hour and in c's
	// minute, whose 3 come along; the windows before them ended before the
	// window before [30:10, 30:20) began.
	require.NoError(t, lim.SetLimit(keylimit.Per(10, 10*s)))
	// 8 left once the 3, the previous count from 30:20, weigh 2: at
	// 30:23.33….
	require.Equal(t, refilled(allowed(10, 7, 15*s), 8333333334), lim.Peek("a"))
	require.Equal(t, refilled(allowed(10, 7, 15*s), 8333333334), lim.Peek("c"))
}

// TestSlidingCounterAgainstSlidingWindow measures the estimate on a
// generated trace, prints the figures (go test -run
// TestSlidingCounterAgainstSlidingWindow -v) and bounds them.
//
// The trace is 10 minutes of 400 keys (2,000 under -full) at 100 a minute,
// most of them well under the limit as on a real service: 90% light clients
// (random arrivals at a twentieth to a half of the limit), 7.5% steady ones
// (0.5 to 1.5 times the limit) and 2.5% bursty ones (bursts of 20 to 200
// requests within a second, about one a minute). Steady and bursty clients spend
// much of their time at the limit, where every decision is marginal: there
// the estimate is wrong far more often than on the whole.
//
// Two figures. "Wrong": at each request, the decision the exact sliding
// window would make on the same history (the events the counter admitted)
// differs from the counter's: the estimate's own error, the measure
// Cloudflare reports. "Diverge": an exact SlidingWindow fed the same
// requests decides differently; once two limiters admit different events
// their histories differ, so this counts the drift that follows each error
// too.
//
// The counter must also keep its own bounds: never more than 2 × Events in
// any interval of Period, never more than Events in one aligned window.
func TestSlidingCounterAgainstSlidingWindow(t *testing.T) {
	l := keylimit.PerMinute(100)
	const span = 10 * time.Minute
	keys := sized(400, 2000)
	type request struct {
		at  time.Duration
		key int
	}
	rng := rand.New(rand.NewPCG(2024, 6))
	var trace []request
	class := func(key int) string {
		switch {
		case key < keys*3/40:
			return "steady"
		case key < keys/10:
			return "bursty"
		}
		return "light"
	}
	for key := range keys {
		switch class(key) {
		case "steady", "light":
			rate := 0.5 + rng.Float64() // times the limit
			if class(key) == "light" {
				rate = 0.05 + 0.45*rng.Float64()
			}
			mean := float64(l.Period) / float64(l.Events) / rate
			for at := time.Duration(rng.ExpFloat64() * mean); at < span; at += time.Duration(rng.ExpFloat64() * mean) {
				trace = append(trace, request{at, key})
			}
		case "bursty":
			for at := time.Duration(rng.ExpFloat64() * float64(l.Period)); at < span; at += time.Duration(rng.ExpFloat64() * float64(l.Period)) {
				for range 20 + rng.IntN(181) {
					trace = append(trace, request{at + time.Duration(rng.Int64N(int64(s))), key})
				}
			}
		}
	}
	sort.Slice(trace, func(i, j int) bool { return trace[i].at < trace[j].at })

	mock := newFastClock()
	exact := build(t, keylimit.NewSlidingWindow[int], l, keylimit.WithClock(mock))
	counter := build(t, keylimit.NewSlidingCounter[int], l, keylimit.WithClock(mock))
	type tally struct{ requests, wrong, wrongOver, diverge int }
	byKind := map[string]*tally{}
	admitted := make([][]time.Duration, keys) // the counter's admissions, per key
	inWindow := make([]int, keys)             // index of the first of them in the window
	var now time.Duration
	for _, r := range trace {
		mock.Add(r.at - now)
		now = r.at
		// The exact decision on the counter's own history.
		times := admitted[r.key]
		for inWindow[r.key] < len(times) && times[inWindow[r.key]] <= now-l.Period {
			inWindow[r.key]++
		}
		truth := len(times)-inWindow[r.key] < l.Events
		c, e := counter.Allow(r.key), exact.Allow(r.key)

		k := byKind[class(r.key)]
		if k == nil {
			k = new(tally)
			byKind[class(r.key)] = k
		}
		k.requests++
		if c != truth {
			k.wrong++
			if c {
				k.wrongOver++
			}
		}
		if c != e {
			k.diverge++
		}
		if c {
			admitted[r.key] = append(admitted[r.key], r.at)
		}
	}

	var all tally
	for _, name := range []string{"steady", "bursty", "light"} {
		k := byKind[name]
		all.requests += k.requests
		all.wrong += k.wrong
		all.wrongOver += k.wrongOver
		all.diverge += k.diverge
		t.Logf("%-7s %8d requests: wrong %6.3f%% (%.3f%% admitted, %.3f%% refused), diverge %6.3f%%",
			name, k.requests, pct(k.wrong, k.requests), pct(k.wrongOver, k.requests), pct(k.wrong-k.wrongOver, k.requests), pct(k.diverge, k.requests))
	}
	t.Logf("all     %8d requests: wrong %6.3f%% (%.3f%% admitted, %.3f%% refused), diverge %6.3f%%",
		all.requests, pct(all.wrong, all.requests), pct(all.wrongOver, all.requests), pct(all.wrong-all.wrongOver, all.requests), pct(all.diverge, all.requests))
	require.Zero(t, byKind["light"].wrong, "keys well under their limit never meet the estimate's error")
	for _, name := range []string{"steady", "bursty"} {
		k := byKind[name]
		require.Less(t, pct(k.wrong, k.requests), 35.0, "%s: the estimate is right on most decisions even at the limit", name)
		require.Greater(t, k.wrong, 0, "%s: the trace reaches the limit often enough to tell the two apart", name)
	}
	require.Less(t, pct(all.wrong, all.requests), 10.0, "the estimate stays close to the exact window")

	// The counter's own bounds, on every key.
	for key, times := range admitted {
		most, from := 0, time.Duration(0) // the most events in one Period, and when it starts
		for i, j := 0, 0; i < len(times); i++ {
			for j < len(times) && times[j] < times[i]+l.Period {
				j++
			}
			if j-i > most {
				most, from = j-i, times[i]
			}
		}
		require.LessOrEqual(t, most, 2*l.Events, "key %d: events in one Period from %v", key, from)
		perWindow := map[time.Duration]int{}
		for _, at := range times {
			perWindow[(time.Duration(mock.Now().UnixNano())-now+at).Truncate(l.Period)]++
		}
		for w, n := range perWindow {
			require.LessOrEqual(t, n, l.Events, "key %d: events in the aligned window of %v", key, w)
		}
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

// TestDecisionsAgreeWithPeek: at every step of a random walk of a mock
// clock, near window boundaries, across one window and across many, Allow
// and Take of one event decide as Peek, a moment before, said they would,
// and a refused Take reports what Peek reported. Peek finds the key's
// window by the general arithmetic; Allow and Take by the shortcuts of
// their hot path (the word's own window, a SlidingCounter's next window,
// Allow's judgement without a report), which this holds to it. The window
// types' decisions are also held to a model of their quota, counts of
// admissions by aligned second (the SlidingWindow's, admission times), so
// that a shortcut and Peek cannot agree on a wrong window.
func TestDecisionsAgreeWithPeek(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			mock := newFastClock() // at a whole second
			lim := k.on(t, mock, keylimit.PerSecond(5))
			rng := rand.New(rand.NewPCG(38, uint64(len(k.name))))
			allowed, refused := 0, 0
			type admission struct {
				key string
				at  int64
			}
			var log []admission // every admission, in time order
			model := func(key string, now int64) bool {
				const events, period = 5, int64(time.Second)
				var prev, cur, inWindow int64
				for _, a := range log {
					switch {
					case a.key != key:
					case a.at/period == now/period:
						cur++
					case a.at/period == now/period-1:
						prev++
					}
					if a.key == key && a.at > now-period {
						inWindow++
					}
				}
				switch k {
				case fixedWindow:
					return cur+1 <= events
				case slidingCounter:
					return cur+1 <= events && prev*(period-now%period) <= (events-cur-1)*period
				case slidingWindow:
					return inWindow+1 <= events
				}
				return true // the bucket: Peek's word only
			}
			for i := range 20000 {
				switch rng.IntN(8) {
				case 0: // to a moment around a boundary
					now := mock.Now().UnixNano()
					next := (now/int64(time.Second) + 1) * int64(time.Second)
					mock.Add(time.Duration(next-now) + time.Duration(rng.Int64N(3)-1))
				case 1: // over one or more windows
					mock.Add(time.Duration(1+rng.Int64N(3)) * time.Second)
				default:
					mock.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				}
				key := string(rune('a' + rng.IntN(3)))
				for range 1 + rng.IntN(7) {
					now := mock.Now().UnixNano()
					for len(log) > 0 && log[0].at <= now-2*int64(time.Second) {
						log = log[1:] // weighs on no decision any more
					}
					peek := lim.Peek(key)
					if k != tokenBucket {
						require.Equal(t, model(key, now), peek.Allowed, "step %d: Peek %+v against the model", i, peek)
					}
					if rng.IntN(2) == 0 {
						ok := lim.Allow(key)
						require.Equal(t, peek.Allowed, ok, "step %d: Allow against Peek %+v", i, peek)
						if ok {
							allowed++
							log = append(log, admission{key, now})
						} else {
							refused++
						}
						continue
					}
					r := lim.Take(key, 1)
					require.Equal(t, peek.Allowed, r.Allowed, "step %d: Take %+v against Peek %+v", i, r, peek)
					if r.Allowed {
						allowed++
						log = append(log, admission{key, now})
					} else {
						refused++
						require.Equal(t, peek, r, "step %d: a refused Take reports as Peek", i)
					}
				}
			}
			require.Greater(t, allowed, 5000, "the walk admits often")
			require.Greater(t, refused, 5000, "and refuses often")
		})
	}
}
