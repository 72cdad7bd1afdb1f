package keylimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// constructor is the shape of every limiter constructor: NewFixedWindow[K],
// NewSlidingWindow[K], NewSlidingCounter[K], NewTokenBucket[K].
type constructor[L any] func(keylimit.Limit, ...keylimit.Option) (L, error)

// newMock returns a limiter of l made by ctor on a new mock clock, which
// starts at the Unix epoch (so on a window boundary), and closes it when
// the test ends.
func newMock[L interface{ Close() error }](t testing.TB, ctor constructor[L], l keylimit.Limit, opts ...keylimit.Option) (L, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	lim, err := ctor(l, append([]keylimit.Option{keylimit.WithClock(mock)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim, mock
}

// newFrozen returns a limiter of l made by ctor on a fastClock that nothing
// moves, and closes it when the test ends.
func newFrozen[L interface{ Close() error }](t testing.TB, ctor constructor[L], l keylimit.Limit) L {
	t.Helper()
	lim, err := ctor(l, keylimit.WithClock(newFastClock()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim
}

func TestFixedWindowSteps(t *testing.T) {
	// 3 per 10 s; the mock clock starts on a window boundary.
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.Per(3, 10*s))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(3, 3, 0)},
		{0, "take", "a", 1, allowed(3, 2, 10*s)},
		{2 * s, "take", "a", 2, allowed(3, 0, 8*s)},
		{2 * s, "take", "a", 1, refused(3, 0, 8*s, 8*s)},
		{2 * s, "take", "b", 3, allowed(3, 0, 8*s)}, // keys are independent
		{5 * s, "peek", "a", 0, refused(3, 0, 5*s, 5*s)},
		{5 * s, "take", "a", 4, refused(3, 0, keylimit.InfDuration, 5*s)},
		// The refused calls counted nothing; the window ends at exactly 10 s.
		{10*s - 1, "take", "a", 1, refused(3, 0, 1, 1)},
		{10 * s, "take", "a", 1, allowed(3, 2, 10*s)},
		{10 * s, "take", "a", 0, allowed(3, 2, 10*s)},
		{10 * s, "take", "a", -1, refused(3, 2, keylimit.InfDuration, 10*s)},
		{15 * s, "take", "a", 2, allowed(3, 0, 5*s)},
		{15 * s, "reset", "a", 0, keylimit.Result{}},
		{15 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{15 * s, "take", "a", 3, allowed(3, 0, 5*s)},
		// A window with nothing counted is full: ResetAfter 0.
		{45 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{45 * s, "peek", "never-seen", 0, allowed(3, 3, 0)},
	})
	require.Equal(t, 2, lim.Len(), "peek and refused calls create no key")
}

// TestBoundaryFixedVersusSliding is the boundary weakness of fixed windows:
// with 10 a minute, 10 requests 100 ms before a boundary and 10 more 200 ms
// later all pass a FixedWindow. A SlidingWindow refuses the second 10 until
// the first leave its window, 60 s after they came: 59.8 s after the second
// 10. The SlidingCounter's estimate refuses them too, but lets the first
// through again after 5.9 s (it counts the previous window's 10 as if spread
// over that window).
func TestBoundaryFixedVersusSliding(t *testing.T) {
	mock := clock.NewMock() // starts at the Unix epoch, on a minute boundary
	l := keylimit.PerMinute(10)
	fixed, err := keylimit.NewFixedWindow[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer fixed.Close()
	sliding, err := keylimit.NewSlidingWindow[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer sliding.Close()
	counter, err := keylimit.NewSlidingCounter[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer counter.Close()

	boundary := mock.Now().Add(time.Minute)
	mock.Set(boundary.Add(-100 * ms))
	for i := range 10 {
		require.True(t, fixed.Allow("k"), "fixed, request %d before the boundary", i+1)
		require.True(t, sliding.Allow("k"), "sliding, request %d before the boundary", i+1)
		require.True(t, counter.Allow("k"), "counter, request %d before the boundary", i+1)
	}
	mock.Set(boundary.Add(100 * ms))
	for i := range 10 {
		require.Equal(t, allowed(10, 9-i, time.Minute-100*ms), fixed.Take("k", 1), "fixed, request %d after the boundary", i+1)
		require.Equal(t, refused(10, 0, 59800*ms, 59800*ms), sliding.Take("k", 1), "sliding, request %d after the boundary", i+1)
		require.Equal(t, refused(10, 0, 5900*ms, 59900*ms), counter.Take("k", 1), "counter, request %d after the boundary", i+1)
	}
}

func TestFixedWindowAlignsToTheEpoch(t *testing.T) {
	// Windows start on multiples of Period since the Unix epoch, wherever
	// the limiter was created, before the epoch as well as after it.
	for _, created := range []time.Time{
		time.Unix(90, 0),                  // 1:30 after the epoch
		time.Unix(-90, 0),                 // 1:30 before it
		time.Unix(1_700_000_030, 5).UTC(), // 30 s and 5 ns into a minute
	} {
		mock := clock.NewMock()
		mock.Set(created)
		lim, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(1), keylimit.WithClock(mock))
		require.NoError(t, err)
		// Truncate rounds down since year 1, a whole number of minutes
		// before the epoch.
		boundary := created.Truncate(time.Minute).Add(time.Minute)
		left := boundary.Sub(created)
		require.Equal(t, allowed(1, 0, left), lim.Take("k", 1), "created at %v", created)
		mock.Set(boundary.Add(-1))
		require.False(t, lim.Allow("k"), "1 ns before the boundary, created at %v", created)
		mock.Set(boundary)
		require.True(t, lim.Allow("k"), "on the boundary, created at %v", created)
		lim.Close()
	}
}

func TestWindowLimits(t *testing.T) {
	tests := []struct {
		name string
		new  func(keylimit.Limit) error
		l    keylimit.Limit
		err  string // substring; "" means valid
	}{
		{"fixed 3/ns", newErr(keylimit.NewFixedWindow[string]), keylimit.Per(3, 1), ""},
		{"fixed 4/ns", newErr(keylimit.NewFixedWindow[string]), keylimit.Per(4, 1), "keylimit: a FixedWindow counts at most 3 events per 1ns, not 4"},
		{"fixed 2^32-1/s", newErr(keylimit.NewFixedWindow[string]), keylimit.PerSecond(1<<32 - 1), ""},
		{"fixed 2^32/s", newErr(keylimit.NewFixedWindow[string]), keylimit.PerSecond(1 << 32), "at most 4294967295 events per 1s"},
		{"fixed longest period", newErr(keylimit.NewFixedWindow[string]), keylimit.Per(1<<30, 1<<60), ""},
		{"fixed ignores burst", newErr(keylimit.NewFixedWindow[string]), keylimit.PerSecond(5).WithBurst(1), ""},
		{"fixed zero period", newErr(keylimit.NewFixedWindow[string]), keylimit.Per(5, 0), "keylimit: period 0s is not positive"},
		{"sliding cap", newErr(keylimit.NewSlidingWindow[string]), keylimit.PerHour(keylimit.MaxSlidingWindowEvents), ""},
		{"sliding above cap", newErr(keylimit.NewSlidingWindow[string]), keylimit.PerHour(keylimit.MaxSlidingWindowEvents + 1),
			"keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter"},
		{"sliding 1/ns", newErr(keylimit.NewSlidingWindow[string]), keylimit.Per(1, 1), ""},
		{"sliding zero events", newErr(keylimit.NewSlidingWindow[string]), keylimit.PerHour(0), "keylimit: events 0 is below 1"},
		{"counter 65535/s", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerSecond(65_535), ""},
		{"counter 65536/s", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerSecond(65_536),
			"keylimit: a SlidingCounter counts at most 65535 events per 1s, not 65536: use a longer Period, or a FixedWindow or TokenBucket"},
		{"counter 524287/min", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerMinute(524_287), ""},
		{"counter 524288/min", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerMinute(524_288), "at most 524287 events per 1m0s"},
		{"counter 4194303/h", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerHour(4_194_303), ""},
		{"counter 4194304/h", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerHour(4_194_304), "at most 4194303 events per 1h0m0s"},
		{"counter 16777215/day", newErr(keylimit.NewSlidingCounter[string]), keylimit.Per(16_777_215, 24*time.Hour), ""},
		{"counter 16777216/day", newErr(keylimit.NewSlidingCounter[string]), keylimit.Per(16_777_216, 24*time.Hour), "at most 16777215 events per 24h0m0s"},
		{"counter negative burst", newErr(keylimit.NewSlidingCounter[string]), keylimit.PerSecond(5).WithBurst(-1), "keylimit: burst -1 is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.new(tt.l)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.err)
		})
	}
}

// newErr adapts a constructor to report only its error, closing what it made.
func newErr[L interface{ Close() error }](ctor constructor[L]) func(keylimit.Limit) error {
	return func(l keylimit.Limit) error {
		lim, err := ctor(l)
		if err == nil {
			lim.Close()
		}
		return err
	}
}

func TestFixedWindowExactUnderContentionFrozenClock(t *testing.T) {
	// The quota is large so that admissions race for the whole first third
	// of the million attempts, not only for the first few microseconds.
	testExactUnderContention(t, newFrozen(t, keylimit.NewFixedWindow[string], keylimit.PerHour(300_000)), 300_000)
}

// testExactUnderContentionMixedN has goroutines ask for 1, 2 and 3 events at
// once on one key of lim (quota a multiple of 6, frozen clock): the events
// admitted add up to the quota, less at most 2 that no request of 3 fits.
func testExactUnderContentionMixedN(t *testing.T, lim keylimit.Limiter[string], quota int) {
	t.Helper()
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range 30 {
		n := g%3 + 1
		wg.Go(func() {
			for range quota / 6 {
				if lim.AllowN("hot", n) {
					taken.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, taken.Load(), int64(quota))
	require.Greater(t, taken.Load(), int64(quota-3), "at most 2 events can be left that no request of 3 fits")
	require.Equal(t, quota-int(taken.Load()), lim.Peek("hot").Remaining)
}

func TestFixedWindowExactUnderContentionMixedN(t *testing.T) {
	testExactUnderContentionMixedN(t, newFrozen(t, keylimit.NewFixedWindow[string], keylimit.PerHour(60_000)), 60_000)
}

func TestFixedWindowClockStepsBack(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(3))
	t0 := mock.Now()
	mock.Set(t0.Add(130 * s)) // in the window [120 s, 180 s)
	require.True(t, lim.AllowN("k", 3))

	// Back into the previous window: the key decides in its own window,
	// whose end is now 110 s away. No capacity reopens.
	mock.Set(t0.Add(70 * s))
	require.Equal(t, refused(3, 0, 110*s, 110*s), lim.Take("k", 1))
	require.Equal(t, refused(3, 0, 110*s, 110*s), lim.Peek("k"))
	require.True(t, lim.Allow("fresh"), "a new key has a full window whenever it starts")

	// Far before the limiter's creation, and far after: no panic.
	mock.Set(t0.AddDate(-1000, 0, 0))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.Add(179 * s))
	require.False(t, lim.Allow("k"), "stepping back and forth again reopens nothing")
	mock.Set(t0.Add(180 * s))
	require.True(t, lim.AllowN("k", 3))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.AddDate(1000, 0, 0))
	require.True(t, lim.AllowN("k", 3))
	require.False(t, lim.Allow("k"))
}

// testAllocs checks that Allow, Take and Peek allocate nothing on a key the
// limiter made by ctor has seen, admitted or refused.
func testAllocs[L interface {
	keylimit.Limiter[string]
	Close() error
}](t *testing.T, ctor constructor[L], loose, tight keylimit.Limit) {
	t.Helper()
	key := fmt.Sprintf("user-%d", 42)
	lim := newFrozen(t, ctor, loose)
	lim.Allow(key)
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow(key) }), "Allow")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Take(key, 1) }), "Take")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Peek(key) }), "Peek")

	full := newFrozen(t, ctor, tight)
	require.True(t, full.Allow(key))
	require.False(t, full.Allow(key))
	require.Zero(t, testing.AllocsPerRun(1000, func() { full.Allow(key) }), "refused Allow")
	require.Zero(t, testing.AllocsPerRun(1000, func() { full.Take(key, 1) }), "refused Take")
}

func TestFixedWindowAllocs(t *testing.T) {
	testAllocs(t, keylimit.NewFixedWindow[string], keylimit.PerHour(1_000_000), keylimit.PerHour(1))
}

func TestFixedWindowRefund(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(3))
	require.True(t, lim.AllowN("k", 3))
	lim.Refund("k", 2)
	require.Equal(t, 2, lim.Peek("k").Remaining)
	lim.Refund("k", 10)
	require.Equal(t, allowed(3, 3, 0), lim.Peek("k"), "never beyond the full quota")
	lim.Refund("never-seen", 1)
	lim.Refund("k", -1)
	require.Equal(t, 1, lim.Len(), "Refund creates no key")

	require.True(t, lim.AllowN("k", 3))
	mock.Add(time.Minute)
	require.True(t, lim.Allow("k"))
	lim.Refund("k", 3) // one from this window; the previous window's are gone already
	require.Equal(t, allowed(3, 3, 0), lim.Peek("k"))
	require.True(t, lim.AllowN("k", 3))
	require.False(t, lim.Allow("k"))
}

func TestFixedWindowWait(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewFixedWindow[string], keylimit.Per(2, 10*s))
	t0 := mock.Now()
	mock.Add(4 * s)
	ctx := context.Background()
	require.NoError(t, lim.WaitN(ctx, "k", 2))

	done := make(chan struct{})
	var err error
	go func() { defer close(done); err = lim.Wait(ctx, "k") }()
	advanceUntil(t, mock, 100*ms, done)
	require.NoError(t, err)
	require.GreaterOrEqual(t, mock.Now().Sub(t0), 10*s, "the window ends at 10 s")
	require.Equal(t, 1, lim.Peek("k").Remaining, "the wait counted its event")

	require.ErrorIs(t, lim.WaitN(ctx, "k", 3), keylimit.ErrExceedsLimit)
	require.NoError(t, lim.Wait(ctx, "k"))
	dctx, cancel := mock.WithTimeout(ctx, time.Second)
	defer cancel()
	require.ErrorIs(t, lim.Wait(dctx, "k"), keylimit.ErrWouldExceedDeadline)
}

// trackingLimiter is a Limiter that counts its keys.
type trackingLimiter interface {
	keylimit.Limiter[string]
	Len() int
}

// evictionCase describes, for one limiter type, when a key whose events are
// admitted at the given times goes idle.
type evictionCase struct {
	name string
	new  func(t *testing.T, l keylimit.Limit, opts ...keylimit.Option) (trackingLimiter, *clock.Mock)
	// idle returns when a key that admitted at t0+at goes idle, for the
	// test's limit of 2 per 10 s on a clock that starts on a boundary.
	idle func(at time.Duration) time.Duration
}

func windowEvictionCases() []evictionCase {
	window := func(at time.Duration) time.Duration { return at.Truncate(10*s) + 10*s }
	return []evictionCase{
		{"FixedWindow", asLimiter(keylimit.NewFixedWindow[string]), window},
		{"SlidingWindow", asLimiter(keylimit.NewSlidingWindow[string]), func(at time.Duration) time.Duration { return at + 10*s }},
		{"SlidingCounter", asLimiter(keylimit.NewSlidingCounter[string]), func(at time.Duration) time.Duration { return window(at) + 10*s }},
	}
}

// asLimiter adapts a constructor to evictionCase.new.
func asLimiter[L interface {
	trackingLimiter
	Close() error
}](ctor constructor[L]) func(t *testing.T, l keylimit.Limit, opts ...keylimit.Option) (trackingLimiter, *clock.Mock) {
	return func(t *testing.T, l keylimit.Limit, opts ...keylimit.Option) (trackingLimiter, *clock.Mock) {
		lim, mock := newMock(t, ctor, l, opts...)
		return lim, mock
	}
}

// TestWindowKeyCapEvictsOnlyIdleKeys: at the key cap, a new key is admitted
// exactly when a tracked key goes idle, and only the idle keys are
// forgotten. It pins each type's idle time (retireIfIdle and idleAt): not
// 1 ns before, and the RetryAfter of an untracked key says when.
func TestWindowKeyCapEvictsOnlyIdleKeys(t *testing.T) {
	for _, c := range windowEvictionCases() {
		t.Run(c.name, func(t *testing.T) {
			lim, mock := c.new(t, keylimit.Per(2, 10*s), keylimit.WithMaxKeys(2), keylimit.WithEvictionInterval(0))
			t0 := mock.Now()
			mock.Set(t0.Add(3 * s))
			require.True(t, lim.Allow("a"))
			mock.Set(t0.Add(9 * s))
			require.True(t, lim.Allow("b"))
			idleA, idleB := c.idle(3*s), c.idle(9*s)

			r := lim.Take("new", 1)
			require.True(t, r.Untracked, "no key is idle at 9 s")
			require.False(t, r.Allowed)
			require.Equal(t, idleA-9*s, r.RetryAfter, "an untracked key learns when a place frees up")

			mock.Set(t0.Add(idleA - 1))
			require.True(t, lim.Take("new", 1).Untracked, "a is idle only at %v", idleA)
			require.Equal(t, 1, lim.Peek("a").Remaining, "a keeps its state until idle")

			mock.Set(t0.Add(idleA))
			r = lim.Take("new", 1)
			require.True(t, r.Allowed)
			require.False(t, r.Untracked, "a went idle at %v and made room", idleA)
			if idleB > idleA {
				require.Equal(t, 2, lim.Len(), "b is not idle")
				require.True(t, lim.Allow("b"), "b keeps its state: one of its 2 left")
				require.False(t, lim.Allow("b"))
			} else {
				require.Equal(t, 1, lim.Len(), "b went idle with a")
			}
		})
	}
}

// TestWindowEvictorForgetsIdleKeysOnly runs the background evictor every
// millisecond of real time: keys are never forgotten before they are idle on
// the limiter's clock, and are forgotten once they are.
func TestWindowEvictorForgetsIdleKeysOnly(t *testing.T) {
	for _, c := range windowEvictionCases() {
		t.Run(c.name, func(t *testing.T) {
			lim, mock := c.new(t, keylimit.Per(2, 10*s), keylimit.WithEvictionInterval(time.Millisecond))
			t0 := mock.Now()
			mock.Set(t0.Add(3 * s))
			require.True(t, lim.AllowN("a", 2))
			mock.Set(t0.Add(9 * s))
			require.True(t, lim.Allow("b"))
			idleA, idleB := c.idle(3*s), c.idle(9*s)

			mock.Set(t0.Add(idleA - 1))
			time.Sleep(30 * time.Millisecond) // some 30 sweeps
			require.Equal(t, 2, lim.Len(), "no key is idle yet")
			require.Equal(t, time.Duration(1), lim.Peek("a").ResetAfter, "a is whole again in 1 ns")

			mock.Set(t0.Add(idleA))
			if idleB > idleA {
				require.Eventually(t, func() bool { return lim.Len() == 1 }, 5*time.Second, time.Millisecond, "a is idle")
				require.Equal(t, 1, lim.Peek("b").Remaining, "b is not")
				mock.Set(t0.Add(idleB - 1))
				time.Sleep(30 * time.Millisecond)
				require.Equal(t, 1, lim.Len(), "b is not idle yet")
				mock.Set(t0.Add(idleB))
			}
			require.Eventually(t, func() bool { return lim.Len() == 0 }, 5*time.Second, time.Millisecond, "every key is idle")
			require.True(t, lim.AllowN("a", 2), "a forgotten key starts afresh")
		})
	}
}

func TestWindowOptionErrors(t *testing.T) {
	_, err := keylimit.NewFixedWindow[string](keylimit.PerSecond(1), keylimit.WithMaxKeys(0))
	require.EqualError(t, err, "keylimit: max keys 0 is below 1", "option errors reach the window constructors")
	_, err = keylimit.NewSlidingWindow[string](keylimit.PerSecond(1), keylimit.WithMaxKeys(0))
	require.EqualError(t, err, "keylimit: max keys 0 is below 1")
	_, err = keylimit.NewSlidingCounter[string](keylimit.PerSecond(1), keylimit.WithMaxKeys(0))
	require.EqualError(t, err, "keylimit: max keys 0 is below 1")
	_, err = keylimit.NewFixedWindow[string](keylimit.PerSecond(0), keylimit.WithMaxKeys(0))
	require.EqualError(t, err, "keylimit: events 0 is below 1", "the limit's error comes first")
}
