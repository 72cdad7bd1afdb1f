package keylimit

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sweptWindow is a window limiter as the eviction race tests use it: its
// Allow, its SetLimit, and a sweep of its keys.
type sweptWindow struct {
	allow    func(int) bool
	setLimit func(Limit) error
	sweep    func() int
}

// windowTypes are the window types, each made at l on clk with no eviction
// in the background, for the tests that run on each.
var windowTypes = []struct {
	name string
	new  func(l Limit, clk *testClock) sweptWindow
}{
	{"FixedWindow", func(l Limit, clk *testClock) sweptWindow {
		lim, _ := NewFixedWindow[int](l, WithClock(clk), WithEvictionInterval(0))
		return sweptWindow{lim.Allow, lim.SetLimit, func() int { return sweepNow(lim.w.keys) }}
	}},
	{"SlidingWindow", func(l Limit, clk *testClock) sweptWindow {
		lim, _ := NewSlidingWindow[int](l, WithClock(clk), WithEvictionInterval(0))
		return sweptWindow{lim.Allow, lim.SetLimit, func() int { return sweepNow(lim.keys) }}
	}},
	{"SlidingCounter", func(l Limit, clk *testClock) sweptWindow {
		lim, _ := NewSlidingCounter[int](l, WithClock(clk), WithEvictionInterval(0))
		return sweptWindow{lim.Allow, lim.SetLimit, func() int { return sweepNow(lim.w.keys) }}
	}},
}

// TestWindowEvictionRaceAdmitsExactly is TestEvictionRaceAdmitsExactly for
// the window types: each key starts each round idle, two Periods after the
// last, and must admit exactly Events in the round while sweeps run back to
// back. An admission recorded in a state that was evicted (for a
// SlidingWindow, made under the lock of a retired log) would show as an
// extra one.
func TestWindowEvictionRaceAdmitsExactly(t *testing.T) {
	const events = 50
	l := PerHour(events)
	for _, typ := range windowTypes {
		t.Run(typ.name, func(t *testing.T) {
			clk := newTestClock()
			lim := typ.new(l, clk)
			admitExactlyWhileSweeping(t, clk, lim.allow, lim.sweep, events, 2*time.Hour)
		})
	}
}

// TestWindowEvictionRaceAdmitsExactlyWhileLimitsChange is
// TestWindowEvictionRaceAdmitsExactly with the limit set anew (to itself)
// every few calls: each key moves to new states while sweeps retire idle
// ones and admissions race with both, and still exactly Events pass a
// round.
func TestWindowEvictionRaceAdmitsExactlyWhileLimitsChange(t *testing.T) {
	const events = 50
	l := PerHour(events)
	// withMoves wraps allow so that every 31st call starts a generation.
	// The calls run on the rounds' goroutines, which do not assert:
	// setErr returns the first error of set, for the test to check after
	// the rounds.
	withMoves := func(set func(Limit) error, allow func(int) bool) (wrapped func(int) bool, setErr func() error) {
		var calls atomic.Int64
		var first atomic.Pointer[error]
		wrapped = func(k int) bool {
			if calls.Add(1)%31 == 0 {
				if err := set(l); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
			return allow(k)
		}
		setErr = func() error {
			if p := first.Load(); p != nil {
				return *p
			}
			return nil
		}
		return wrapped, setErr
	}
	for _, typ := range windowTypes {
		t.Run(typ.name, func(t *testing.T) {
			clk := newTestClock()
			lim := typ.new(l, clk)
			allow, setErr := withMoves(lim.setLimit, lim.allow)
			admitExactlyWhileSweeping(t, clk, allow, lim.sweep, events, 2*time.Hour)
			require.NoError(t, setErr(), "SetLimit to the same limit during the rounds")
		})
	}
}

// TestResetAndRefundFollowAMove pins what Reset and Refund do when they
// meet a state that a change of limit has moved, but that the map still
// shows (the move is under way): they wait for the new state and act on it.
func TestResetAndRefundFollowAMove(t *testing.T) {
	lim, _ := NewFixedWindow[string](PerHour(5), WithClock(newTestClock()), WithEvictionInterval(0))
	defer lim.Close()
	// moveByHand moves k's state as moveKey does, but leaves the map
	// showing the old state until the returned function is called.
	moveByHand := func() (finish func()) {
		old := lim.w.keys.load("k")
		nu, ok := old.moveTo(old.cfg, lim.w.keys.clock.now())
		require.True(t, ok, "moveTo of a live state")
		return func() { lim.w.keys.m.Store(lim.w.keys.hash("k"), nu) }
	}
	// during runs op while a move is under way, and checks that op waits
	// for it.
	during := func(op func()) {
		finish := moveByHand()
		done := make(chan struct{})
		go func() { defer close(done); op() }()
		select {
		case <-done:
			require.FailNow(t, "acted on a moved state without waiting for the new one")
		case <-time.After(20 * time.Millisecond):
		}
		finish()
		<-done
	}

	_, adm := lim.Admit("k", 4)
	during(func() { lim.Refund("k", adm) })
	require.Equal(t, 5, lim.Peek("k").Remaining, "Remaining after a refund of 4 across a move")
	during(func() { lim.Reset("k") })
	require.Equal(t, 5, lim.Peek("k").Remaining, "Remaining after a Reset across a move")
	require.Zero(t, lim.Stats().Keys, "keys after a Reset across a move")

	// A SlidingWindow, whose states move under their lock.
	s, _ := NewSlidingWindow[string](PerHour(5), WithClock(newTestClock()), WithEvictionInterval(0))
	defer s.Close()
	_, sadm := s.Admit("k", 4)
	old := s.keys.load("k")
	nu, _ := old.moveTo(old.cfg, 0)
	done := make(chan struct{})
	go func() { defer close(done); s.Refund("k", sadm); s.Reset("k") }()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-done:
		require.FailNow(t, "acted on a moved log without waiting for the new one")
	default:
	}
	s.keys.m.Store(s.keys.hash("k"), nu)
	<-done
	require.Equal(t, 5, s.Peek("k").Remaining, "SlidingWindow: Remaining after a Refund and a Reset across a move")
	require.Zero(t, s.Stats().Keys, "SlidingWindow: keys after a Reset across a move")
}
