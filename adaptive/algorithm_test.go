package adaptive_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/stretchr/testify/require"
)

// window16 makes one window of samples (16 releases) on key: rounds of
// inFlight slots taken at once, held for latency on the mock clock and
// released (dropped if drop). inFlight divides 16.
func window16(t *testing.T, a *adaptive.Limiter[string], mock *clock.Mock, key string, inFlight int, latency time.Duration, drop bool) {
	t.Helper()
	for range 16 / inFlight {
		ps := make([]keylimit.Permit, 0, inFlight)
		for range inFlight {
			p, r := a.TryAcquire(key, 1)
			require.True(t, r.Allowed, "%s: %d in flight", key, len(ps)+1)
			ps = append(ps, p)
		}
		mock.Add(latency)
		for _, p := range ps {
			if drop {
				p.Drop()
			} else {
				p.Release()
			}
		}
	}
}

// limits is the overall limit and key's.
func limits(a *adaptive.Limiter[string], key string) [2]int {
	return [2]int{a.Stats().Limit, a.Peek(key).Limit}
}

// AIMD's tolerance is 1.5 × the baseline: slow start doubles through a
// window at 1.4 × (14 ms over 10 ms) and ends at one above 1.5 × (16 ms),
// which cuts the overall limit by a tenth (16 → 14). The lone key held 8,
// not more than half the overall 16, so that window's latency does not cut
// it: busy, it doubles on to 32.
func TestAIMDToleranceExact(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(4, 100))
	window16(t, a, mock, "k", 4, 10*time.Millisecond, false)
	require.Equal(t, [2]int{8, 8}, limits(a, "k"))
	window16(t, a, mock, "k", 4, 14*time.Millisecond, false)
	require.Equal(t, [2]int{16, 16}, limits(a, "k"), "1.4 × the baseline is within the tolerance")
	window16(t, a, mock, "k", 8, 16*time.Millisecond, false)
	require.Equal(t, [2]int{14, 32}, limits(a, "k"), "1.6 × is not")
	// Now 14 in flight, more than half the overall 14, at 16 ms: both are cut
	// (the window is 14 samples of 14 in flight and 2 of 2; 14 more follow).
	window16(t, a, mock, "k", 14, 16*time.Millisecond, false) // 14 does not divide 16: 14 samples
	window16(t, a, mock, "k", 2, 16*time.Millisecond, false)  // and 2 more make the window
	require.Equal(t, [2]int{12, 28}, limits(a, "k"))
}

// Gradient's tolerance is 1.2 × the baseline, and its queue allowance
// √limit / 2: slow start doubles through a window at 1.2 × and ends at one
// above (20 ms over 10): gradient 0.6, target 16 × 0.6 + 2 = 11.6, the
// limit a fifth of the way there, 15.12. At the baseline latency it grows
// by a fifth of √limit / 2 a window.
func TestGradientToleranceExact(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.Gradient(4, 100))
	window16(t, a, mock, "k", 4, 10*time.Millisecond, false)
	require.Equal(t, 8, a.Stats().Limit)
	window16(t, a, mock, "k", 8, 12*time.Millisecond, false)
	require.Equal(t, 16, a.Stats().Limit, "1.2 × the baseline is within the tolerance")
	window16(t, a, mock, "k", 8, 20*time.Millisecond, false)
	require.Equal(t, 15, a.Stats().Limit, "2 × is not")
	for range 3 { // 15.12 + 0.2 × √limit / 2 ≈ +0.39 a window: 15.51, 15.90, 16.30
		window16(t, a, mock, "k", 8, 10*time.Millisecond, false)
	}
	require.Equal(t, 16, a.Stats().Limit)
}

// A limit not in use comes down: after slow start took both limits to 64
// (the ceiling), windows in which 2 are in flight (not busy: under half
// the limit) move it half the way to twice that, 4, each: 34, 19, 11, 7
// (7.75), 5 (5.875), 4 (4.94); at 4, 2 in flight is half: busy, and slow
// start (latency never rose) doubles it, to 9. Both algorithms, the overall
// limit and the key's.
func TestAdaptiveUnusedLimitDecays(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD(1, 64), adaptive.Gradient(1, 64)} {
		a, mock := newAdaptive(t, alg)
		for _, want := range []int{2, 4, 8, 16, 32, 64} {
			window16(t, a, mock, "k", min(want/2, 16), 10*time.Millisecond, false)
			require.Equal(t, [2]int{want, want}, limits(a, "k"), "slow start")
		}
		var got []int
		for range 7 {
			window16(t, a, mock, "k", 2, 10*time.Millisecond, false)
			got = append(got, a.Stats().Limit)
			require.Equal(t, a.Stats().Limit, a.Peek("k").Limit)
		}
		require.Equal(t, []int{34, 19, 11, 7, 5, 4, 9}, got)
	}
}

// A light key's limit is not cut by the latency a heavy key's queue
// causes: after slow start to 16 at 10 ms, the heavy key holds 12 (more
// than half the overall limit) and the light one 4, at 30 ms (three times
// the baseline), in the same rounds. The heavy key and the overall limit
// are cut; the light key is not; its own drops cut it.
func TestAdaptiveLightKeyNotCutByHeavyLatency(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(4, 32))
	window16(t, a, mock, "heavy", 4, 10*time.Millisecond, false) // overall and heavy 8
	window16(t, a, mock, "heavy", 4, 10*time.Millisecond, false) // 16
	require.Equal(t, [2]int{16, 16}, limits(a, "heavy"))
	light, r := a.TryAcquire("light", 1) // a new key starts at the overall limit, 16
	require.True(t, r.Allowed)
	light.Release()
	require.Equal(t, 16, a.Peek("light").Limit)
	// One window of each, together: heavy 16 samples of 12 in flight (with
	// light's 4 held too), at 30 ms.
	step := func(drop bool) {
		for range 4 {
			var ps, ls []keylimit.Permit
			for range 12 { // as many of 12 as its falling limit lets it
				if p, r := a.TryAcquire("heavy", 1); r.Allowed {
					ps = append(ps, p)
				}
			}
			for range 4 {
				p, r := a.TryAcquire("light", 1)
				require.True(t, r.Allowed)
				ls = append(ls, p)
			}
			mock.Add(30 * time.Millisecond)
			for _, p := range ps[:4] { // the light key's releases see the heavy one holding 8
				p.Release()
			}
			for _, p := range ls {
				if drop {
					p.Drop()
				} else {
					p.Release()
				}
			}
			for _, p := range ps[4:] {
				p.Release()
			}
		}
	}
	step(false)
	// Overall: 4 windows at 30 ms (16 samples a round): slow start ends,
	// then cut four times, 16 × 0.9⁴ = 10.5. Heavy: under 48 samples (the
	// falling overall limit leaves it fewer than 12 in the last round), 2
	// windows, each with a peak above half the overall limit: cut twice,
	// 16 × 0.81 = 12.96. Light: 16 samples, one window, peak 4, not more
	// than half the overall limit: not cut; not busy (4 < 16/2): unused,
	// half the way to twice its peak, 12.
	require.Equal(t, 10, a.Stats().Limit)
	require.Equal(t, 12, a.Peek("heavy").Limit)
	require.Equal(t, 12, a.Peek("light").Limit, "the light key's limit follows its use, not the heavy key's queue")
	// The light key's own calls dropped (a window of drops): it is cut, by
	// a tenth, 12 → 10.8.
	step(true)
	require.Equal(t, 10, a.Peek("light").Limit)
}

// A Critical request passes whenever the total stays within the hard
// bound (three times the overall limit), even for the key most above its
// share: the heavy key holds the overall limit (20), a light key its share
// and one more (11); the heavy key's Default requests are refused, its
// Critical ones pass to a total of 60 (29 more), and then are refused too.
func TestAdaptiveCriticalToTheHardBound(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
	heavy := grab(a, "heavy", 100, keylimit.Default)
	require.Len(t, heavy, 20)
	light := grab(a, "light", 100, keylimit.Default)
	require.Len(t, light, 11)
	require.Empty(t, grab(a, "heavy", 100, keylimit.Default))
	crit := grab(a, "heavy", 100, keylimit.Critical)
	require.Len(t, crit, 29, "critical work passes to the hard bound")
	require.Equal(t, [3]uint64{100 + 100 + 100 - 20 - 11, 100 - 29, 0}, a.Stats().Shed)
	releaseAll(heavy)
	releaseAll(light)
	releaseAll(crit)
}

// A key's own limit does not bound its Critical requests, only the hard
// bound does: key a holds 8 while key b makes three windows with one call
// in flight; b's limit, not in use, comes down from 16 (the overall limit
// it started at) to 9, 5, 3, while the overall one, busy with 9 in flight,
// doubles to 32, then, with 9 under half of it, comes down to 25 and 21
// (half the way to 18 each). Then b's Default requests get 3, its
// Critical ones the rest of the hard bound, 63 − 11.
func TestAdaptiveCriticalNotBoundByTheKeyLimit(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(1, 64))
	for _, n := range []int{1, 2, 4, 8} { // slow start: 1 → 16
		window16(t, a, mock, "a", n, 10*time.Millisecond, false)
	}
	require.Equal(t, [2]int{16, 16}, limits(a, "a"))
	held := grab(a, "a", 8, keylimit.Default)
	require.Len(t, held, 8)
	var got []int
	for range 3 {
		window16(t, a, mock, "b", 1, 10*time.Millisecond, false)
		got = append(got, a.Peek("b").Limit)
	}
	require.Equal(t, []int{9, 5, 3}, got)
	require.Equal(t, 21, a.Stats().Limit)
	def := grab(a, "b", 100, keylimit.Default)
	require.Len(t, def, 3)
	crit := grab(a, "b", 100, keylimit.Critical)
	require.Len(t, crit, 63-11)
	releaseAll(held)
	releaseAll(def)
	releaseAll(crit)
}
