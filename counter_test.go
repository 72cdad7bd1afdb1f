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
	lim, mock := newMock(t, keylimit.NewSlidingCounter[string], keylimit.PerMinute(10))
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
	require.Equal(t, 1, lim.Len(), "b: a was reset, and peeks create no key")
}

func TestSlidingCounterClockStepsBack(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingCounter[string], keylimit.PerMinute(4))
	t0 := mock.Now()
	mock.Set(t0.Add(90 * s))
	require.True(t, lim.AllowN("k", 4))
	before := lim.Peek("k")
	require.Equal(t, refused(4, 0, 45*s, 90*s), before)

	// Back into the previous window: the key decides as at its window's
	// start, 60 s, and waits from there.
	mock.Set(t0.Add(30 * s))
	require.Equal(t, refused(4, 0, 105*s, 150*s), lim.Take("k", 1))
	require.True(t, lim.AllowN("fresh", 4), "a new key has its full quota whenever it starts")

	mock.Set(t0.AddDate(-1000, 0, 0))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.Add(90 * s))
	require.Equal(t, before, lim.Peek("k"), "stepping back and forth changes nothing")
	mock.Set(t0.Add(135 * s))
	require.True(t, lim.Allow("k"))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.AddDate(1000, 0, 0))
	require.True(t, lim.AllowN("k", 4))
	require.False(t, lim.Allow("k"))
}

func TestSlidingCounterExactUnderContentionFrozenClock(t *testing.T) {
	testExactUnderContention(t, newFrozen(t, keylimit.NewSlidingCounter[string], keylimit.PerHour(300_000)), 300_000)
}

func TestSlidingCounterExactUnderContentionMixedN(t *testing.T) {
	testExactUnderContentionMixedN(t, newFrozen(t, keylimit.NewSlidingCounter[string], keylimit.PerHour(60_000)), 60_000)
}

func TestSlidingCounterAllocs(t *testing.T) {
	testAllocs(t, keylimit.NewSlidingCounter[string], keylimit.PerHour(1_000_000), keylimit.PerHour(1))
}

func TestSlidingCounterRefund(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingCounter[string], keylimit.PerMinute(4))
	require.True(t, lim.AllowN("k", 4))
	mock.Add(time.Minute) // the 4 are now the previous window's
	require.Equal(t, 0, lim.Take("k", 0).Remaining)
	mock.Add(30 * s)
	require.True(t, lim.AllowN("k", 2)) // 4 × 1/2 + 2 = 4
	lim.Refund("k", 3)                  // 2 from this window, 1 from the previous
	require.Equal(t, allowed(4, 2, 30*s), lim.Peek("k"), "3 × 1/2 = 1.5 weigh, rounded up to 2")
	lim.Refund("k", 10)
	require.Equal(t, allowed(4, 4, 0), lim.Peek("k"), "never beyond the full quota")
	lim.Refund("never-seen", 1)
	require.Equal(t, 1, lim.Len(), "Refund creates no key")
}

// TestSlidingCounterAgainstSlidingWindow measures the estimate on a
// generated trace, prints the figures (go test -run
// TestSlidingCounterAgainstSlidingWindow -v) and bounds them.
//
// The trace is 10 minutes of 2,000 keys at 100 a minute, most of them well
// under the limit as on a real service: 1,800 light clients (random
// arrivals at a twentieth to a half of the limit), 150 steady ones (0.5 to
// 1.5 times the limit) and 50 bursty ones (bursts of 20 to 200 requests
// within a second, about one a minute). Steady and bursty clients spend
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
	const (
		keys = 2000
		span = 10 * time.Minute
	)
	type request struct {
		at  time.Duration
		key int
	}
	rng := rand.New(rand.NewPCG(2024, 6))
	var trace []request
	kind := func(key int) string {
		switch {
		case key < 150:
			return "steady"
		case key < 200:
			return "bursty"
		}
		return "light"
	}
	for key := range keys {
		switch kind(key) {
		case "steady", "light":
			rate := 0.5 + rng.Float64() // times the limit
			if kind(key) == "light" {
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
	exact := newFrozenAt(t, keylimit.NewSlidingWindow[int], l, mock)
	counter := newFrozenAt(t, keylimit.NewSlidingCounter[int], l, mock)
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

		k := byKind[kind(r.key)]
		if k == nil {
			k = new(tally)
			byKind[kind(r.key)] = k
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
		for i, j := 0, 0; i < len(times); i++ {
			for j < len(times) && times[j] < times[i]+l.Period {
				j++
			}
			require.LessOrEqual(t, j-i, 2*l.Events, "key %d: events in one Period from %v", key, times[i])
		}
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
