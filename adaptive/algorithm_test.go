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
// which takes the overall limit back to where it was before the last
// doubling, the last that did not queue (16 → 8). The lone key held 8,
// not more than half the overall 16, so that window's latency does not
// cut it: busy, it doubles on to 32. From then on a window above the
// tolerance cuts by a tenth, or, further above it, by the ratio of the
// tolerance to the latency (at most by 30%): at 1.6 ×, 0.9; at 2 ×, 0.75;
// at 3 ×, 0.7.
func TestAIMDToleranceExact(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(4, 100))
	window16(t, a, mock, "k", 4, 10*time.Millisecond, false)
	require.Equal(t, [2]int{8, 8}, limits(a, "k"))
	window16(t, a, mock, "k", 4, 14*time.Millisecond, false)
	require.Equal(t, [2]int{16, 16}, limits(a, "k"), "1.4 × the baseline is within the tolerance")
	window16(t, a, mock, "k", 8, 16*time.Millisecond, false)
	require.Equal(t, [2]int{8, 32}, limits(a, "k"), "1.6 × is not: back to the limit before the last doubling")
	// Now 8 in flight, more than half the overall 8, at 16 ms: the overall
	// limit is cut by a tenth, 7.2; the key's slow start, which the last
	// window's latency did not end, ends now: back to 16.
	window16(t, a, mock, "k", 8, 16*time.Millisecond, false)
	require.Equal(t, [2]int{7, 16}, limits(a, "k"))
	// 4 in flight, more than half the overall 7, at 20 ms, 2 × the
	// baseline: both are cut by a quarter, 5.4 and 12; then at 30 ms, 3 ×,
	// by 30% (not more), 3.78 (the floor, 4) and 8.4.
	window16(t, a, mock, "k", 4, 20*time.Millisecond, false)
	require.Equal(t, [2]int{5, 12}, limits(a, "k"), "further above the tolerance: a deeper cut")
	window16(t, a, mock, "k", 4, 30*time.Millisecond, false)
	require.Equal(t, [2]int{4, 8}, limits(a, "k"), "3 ×: cut by 30% at most (the overall one to its floor)")
}

// Gradient's tolerance is 1.2 × the baseline, and its queue allowance
// √limit / 2: slow start doubles through a window at 1.2 × and ends at one
// above (20 ms over 10), back to the limit before the last doubling (16 →
// 8). Another window at 20 ms: gradient 0.6, target 8 × 0.6 + √8 / 2 =
// 6.21, and the limit, above it, 70% of the way there, 6.75. At the
// baseline latency it grows by a fifth of √limit / 2 a window: 7.01, 7.27,
// 7.55, 7.82.
func TestGradientToleranceExact(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.Gradient(4, 100))
	window16(t, a, mock, "k", 4, 10*time.Millisecond, false)
	require.Equal(t, 8, a.Stats().Limit)
	window16(t, a, mock, "k", 8, 12*time.Millisecond, false)
	require.Equal(t, 16, a.Stats().Limit, "1.2 × the baseline is within the tolerance")
	window16(t, a, mock, "k", 8, 20*time.Millisecond, false)
	require.Equal(t, 8, a.Stats().Limit, "2 × is not: back to the limit before the last doubling")
	window16(t, a, mock, "k", 4, 20*time.Millisecond, false)
	require.Equal(t, 6, a.Stats().Limit, "above the tolerance: 70% of the way down to the target")
	var got []int
	for range 4 {
		window16(t, a, mock, "k", 4, 10*time.Millisecond, false)
		got = append(got, a.Stats().Limit)
	}
	require.Equal(t, []int{7, 7, 7, 7}, got, "at the baseline: a fifth of the way up")
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
// causes: after slow start to 32 at 10 ms, the light key holds 4 and the
// heavy one up to 12 (more than half the overall limit) beside it, at 16 ms
// (1.6 × the baseline), in the same rounds. The heavy key and the overall
// limit are cut; the light key is not; its own drops cut it.
func TestAdaptiveLightKeyNotCutByHeavyLatency(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(4, 64))
	for _, n := range []int{4, 4, 8} { // overall and heavy 8, 16, 32
		window16(t, a, mock, "heavy", n, 10*time.Millisecond, false)
	}
	require.Equal(t, [2]int{32, 32}, limits(a, "heavy"))
	light, r := a.TryAcquire("light", 1) // a new key starts at the overall limit, 32
	require.True(t, r.Allowed)
	mock.Add(10 * time.Millisecond)
	light.Release()
	require.Equal(t, 32, a.Peek("light").Limit)
	var heavyHeld []int
	// One window of the light key, 16 samples of 4 in flight, and about
	// three of the heavy key's, at 16 ms.
	step := func(drop bool) {
		for range 4 {
			var ps, ls []keylimit.Permit
			for range 4 {
				p, r := a.TryAcquire("light", 1)
				require.True(t, r.Allowed)
				ls = append(ls, p)
			}
			for range 12 { // as many of 12 as the falling limits let it
				if p, r := a.TryAcquire("heavy", 1); r.Allowed {
					ps = append(ps, p)
				}
			}
			heavyHeld = append(heavyHeld, len(ps))
			mock.Add(16 * time.Millisecond)
			for _, p := range ps[:4] { // the light key's releases see the heavy one holding the rest
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
	// The heavy key took 12, 12, then what the falling overall limit left
	// beside the light key's 4: 10, 10. Overall: 61 samples at 16 ms (the
	// light key's first at 10 ms), 3 windows: slow start ends, back to 16,
	// then cut by a tenth twice, 12.96. Heavy: 44 samples, 2 windows, each
	// with a peak above half the overall limit: slow start ends, back to 16,
	// and cut once, 14.4. Light: 16 samples, one window, peak 4, not more
	// than half the overall limit: not cut; not busy (4 < 32/2): unused,
	// half the way to twice its peak, 20.
	require.Equal(t, []int{12, 12, 10, 10}, heavyHeld)
	require.Equal(t, 12, a.Stats().Limit)
	require.Equal(t, 14, a.Peek("heavy").Limit)
	require.Equal(t, 20, a.Peek("light").Limit, "the light key's limit follows its use, not the heavy key's queue")
	// The light key's own calls dropped (a window of drops): it is cut, by
	// a tenth, 20 → 18.
	step(true)
	require.Equal(t, 18, a.Peek("light").Limit)
}

// A Critical request passes whenever the total stays within the hard
// bound (three times the overall limit), even for the key most above its
// share: the heavy key holds the overall limit (20), a light key takes the
// burst band above it (5, to 25); the heavy key's Default requests are
// refused, its Critical ones pass to a total of 60 (35 more), and then
// are refused too.
func TestAdaptiveCriticalToTheHardBound(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
	heavy := grab(a, "heavy", 100, keylimit.Default)
	require.Len(t, heavy, 20)
	light := grab(a, "light", 100, keylimit.Default)
	require.Len(t, light, 5)
	require.Empty(t, grab(a, "heavy", 100, keylimit.Default))
	crit := grab(a, "heavy", 100, keylimit.Critical)
	require.Len(t, crit, 35, "critical work passes to the hard bound")
	require.Equal(t, [3]uint64{100 + 100 + 100 - 20 - 5, 100 - 35, 0}, a.Stats().Shed)
	releaseAll(heavy)
	releaseAll(light)
	releaseAll(crit)
}

// A slot a key released is kept for it while it may come back for it, from
// a key above its share: with the overall limit fixed at 4 and the overall
// latency 10 ms, a light key that has just released its slot (one at a
// time) leaves the heavy key's 64 goroutines 3 slots, not 4, within the
// limit, and finds its slot when it comes back. Once a latency has passed
// with the light key idle, the heavy key may take it. With the rule before
// (any key within its limit while the total is below the overall limit),
// the heavy key took all 4 and the light key was refused.
func TestAdaptiveKeepsARecentKeysSlot(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(4, 4))
	window16(t, a, mock, "light", 1, 10*time.Millisecond, false)
	heavy := grab(a, "heavy", 64, keylimit.Default)
	require.Len(t, heavy, 3, "a slot is kept for the light key, just idle")
	require.False(t, a.Peek("heavy").Allowed)
	require.True(t, a.Peek("light").Allowed)
	light, r := a.TryAcquire("light", 1)
	require.True(t, r.Allowed, "the light key finds its slot")
	mock.Add(10 * time.Millisecond)
	light.Release()
	require.Empty(t, grab(a, "heavy", 64, keylimit.Default), "kept again, for a latency")
	mock.Add(10*time.Millisecond + 1)
	require.Len(t, grab(a, "heavy", 64, keylimit.Default), 1, "idle longer than a latency: no longer kept")
	require.False(t, a.Peek("light").Allowed)
}

// A key pressing for more than it gets (it was refused at least as often
// as it released, over its last window) is held to its fair share rounded
// down, within the limit; one that is not gets its share rounded up and
// one more. Overall limit fixed at 12: key p is pressed, key u is not, a
// light key has just released its slot (one is kept for it); f holds 5, p
// 3 and u 3, 11 in all. Over the 4 keys active or recent, the share is 3:
// p, at 3, is refused; u, at the same 3, takes the 12th slot. Before, both
// passed (share + 1, to twice the limit).
func TestAdaptivePressedKeyHeldToItsShare(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.AIMD(12, 12))
	for range 16 { // p: a window of releases, each beside a refusal
		p, r := a.TryAcquire("p", 1)
		require.True(t, r.Allowed)
		_, r = a.TryAcquire("p", 12)
		require.False(t, r.Allowed)
		mock.Add(10 * time.Millisecond)
		p.Release()
	}
	window16(t, a, mock, "u", 1, 10*time.Millisecond, false)
	window16(t, a, mock, "light", 1, 10*time.Millisecond, false)
	take := func(key string, n int) {
		for range n {
			_, r := a.TryAcquire(key, 1)
			require.True(t, r.Allowed, key)
		}
	}
	take("f", 5)
	take("p", 3)
	take("u", 3)
	_, r := a.TryAcquire("p", 1)
	require.False(t, r.Allowed, "pressed: its share rounded down")
	_, r = a.TryAcquire("u", 1)
	require.True(t, r.Allowed, "not pressed: its share rounded up, and one more")
	_, r = a.TryAcquire("u", 1)
	require.False(t, r.Allowed, "the limit is reached, and the light key's slot kept")
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

// The burst band above the overall limit is a quarter of it, or a slot
// for each key counted that is not pressed if that is more, up to half
// the limit: at a limit of 8 (no window folded yet), four light keys that
// have each just released a slot keep 4 slots from the heavy key, which
// gets 4; then the light keys, asking in turn, take their shares (8/5
// rounded up, and one more: 3) to a total of 12, the limit and one slot
// for each of the 5 keys up to half the limit (a quarter, 2, would have
// stopped them at 10).
func TestAdaptiveBurstBandPerLightKey(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(8, 100))
	light := []string{"a", "b", "c", "d"}
	for _, k := range light {
		p, r := a.TryAcquire(k, 1)
		require.True(t, r.Allowed)
		p.Release()
	}
	require.Len(t, grab(a, "heavy", 100, keylimit.Default), 4, "a slot kept for each light key")
	var got []int
	for _, k := range light {
		got = append(got, len(grab(a, k, 100, keylimit.Default)))
	}
	require.Equal(t, []int{3, 3, 2, 0}, got)
	require.Equal(t, 8, a.Stats().Limit)
}
