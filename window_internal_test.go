package keylimit

import (
	"testing"
	"time"
)

// TestWindowEvictionRaceAdmitsExactly is TestEvictionRaceAdmitsExactly for
// the window types: each key starts each round idle, two Periods after the
// last, and must admit exactly Events in the round while sweeps run back to
// back. An admission recorded in a state that was evicted (for a
// SlidingWindow, made under the lock of a retired log) would show as an
// extra one.
func TestWindowEvictionRaceAdmitsExactly(t *testing.T) {
	const events = 50
	l := PerHour(events)
	t.Run("FixedWindow", func(t *testing.T) {
		clk := newTestClock()
		lim, _ := NewFixedWindow[int](l, WithClock(clk), WithEvictionInterval(0))
		admitExactlyWhileSweeping(t, clk, lim.Allow, func() int { return sweepNow(lim.keyed) }, events, 2*time.Hour)
	})
	t.Run("SlidingWindow", func(t *testing.T) {
		clk := newTestClock()
		lim, _ := NewSlidingWindow[int](l, WithClock(clk), WithEvictionInterval(0))
		admitExactlyWhileSweeping(t, clk, lim.Allow, func() int { return sweepNow(lim.keyed) }, events, 2*time.Hour)
	})
	t.Run("SlidingCounter", func(t *testing.T) {
		clk := newTestClock()
		lim, _ := NewSlidingCounter[int](l, WithClock(clk), WithEvictionInterval(0))
		admitExactlyWhileSweeping(t, clk, lim.Allow, func() int { return sweepNow(lim.keyed) }, events, 2*time.Hour)
	})
}
