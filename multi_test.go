package keylimit_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// bucketsOn returns token buckets of the given limits sharing one clock.
func bucketsOn(t *testing.T, c keylimit.Option, limits ...keylimit.Limit) []*keylimit.TokenBucket[string] {
	t.Helper()
	var out []*keylimit.TokenBucket[string]
	for _, l := range limits {
		b, err := keylimit.NewTokenBucket[string](l, c)
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		out = append(out, b)
	}
	return out
}

func TestAllRefusedTakesNothing(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(10), keylimit.PerHour(2))
	lim := keylimit.All[string](bs[0], bs[1])

	require.True(t, lim.Allow("k"))
	r := lim.Take("k", 1)
	require.True(t, r.Allowed)
	require.Equal(t, 0, r.Remaining, "the tighter limit binds")
	require.Equal(t, 2, r.Limit, "and brings its Limit")

	// The hour-of-10 takes first, then the hour-of-2 refuses: the first
	// gives its token back.
	r = lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 2, r.Limit, "the limiter that refused decides")
	require.Equal(t, 0, r.Remaining)
	require.Equal(t, bs[1].Peek("k").RetryAfter, r.RetryAfter)
	require.Equal(t, 8, bs[0].Peek("k").Remaining, "the refused call took nothing from the looser limit")

	// n above one limit's quota can never pass, and takes nothing anywhere.
	r = lim.Take("other", 3)
	require.False(t, r.Allowed)
	require.Equal(t, keylimit.InfDuration, r.RetryAfter)
	require.Equal(t, 10, bs[0].Peek("other").Remaining)
}

func TestAllFirstRefusesSecondUntouched(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerSecond(1).WithBurst(3), keylimit.PerMinute(5))
	lim := keylimit.All[string](bs[0], bs[1])
	for range 3 {
		require.True(t, lim.Allow("k"))
	}
	r := lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 3, r.Limit)
	require.Equal(t, 2, bs[1].Peek("k").Remaining, "the second limiter was not asked")
	require.Equal(t, 0, r.Remaining)
	require.Equal(t, bs[0].Peek("k").RetryAfter, r.RetryAfter)
	require.Equal(t, bs[1].Peek("k").ResetAfter, r.ResetAfter, "the largest ResetAfter")

	p := lim.Peek("k")
	require.Equal(t, keylimit.Result{Limit: 3, Remaining: 0, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, p)

	clk.Add(s)
	p = lim.Peek("k")
	require.True(t, p.Allowed)
	require.Equal(t, 1, p.Remaining)
	require.Equal(t, 3, p.Limit, "the bucket with 1 left binds")
}

func TestAllExactUnderContention(t *testing.T) {
	// Many goroutines through All on a frozen clock admit exactly the
	// tightest quota, and the refunds leave the looser limit charged for
	// exactly what was admitted.
	const loose, tight = 50_000, 20_000
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(loose), keylimit.PerHour(tight))
	lim := keylimit.All[string](bs[0], bs[1])
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 1000 {
				if lim.Allow("hot") {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, tight, admitted.Load())
	require.Equal(t, loose-tight, bs[0].Peek("hot").Remaining)
	require.Equal(t, 0, bs[1].Peek("hot").Remaining)
}

func TestAllOrderDoesNotChangeDecisions(t *testing.T) {
	clk := newFastClock()
	a := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerSecond(2).WithBurst(4), keylimit.PerMinute(9))
	b := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerMinute(9), keylimit.PerSecond(2).WithBurst(4))
	ab, ba := keylimit.All[string](a[0], a[1]), keylimit.All[string](b[0], b[1])
	for i := range 200 {
		n := i%3 + 1
		ra, rb := ab.Take("k", n), ba.Take("k", n)
		require.Equal(t, ra.Allowed, rb.Allowed, "call %d", i)
		require.Equal(t, ra.Remaining, rb.Remaining, "call %d", i)
		clk.Add(170 * ms)
	}
}

func TestAllResetAndRefund(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(4), keylimit.PerHour(3))
	lim := keylimit.All[string](bs[0], bs[1])
	require.True(t, lim.AllowN("k", 3))
	lim.(keylimit.Refunder[string]).Refund("k", 2)
	require.Equal(t, 3, bs[0].Peek("k").Remaining)
	require.Equal(t, 2, bs[1].Peek("k").Remaining)
	lim.Reset("k")
	require.Equal(t, 4, bs[0].Peek("k").Remaining)
	require.Equal(t, 3, bs[1].Peek("k").Remaining)
}

// notRefunder is a Limiter without Refund.
type notRefunder struct{ keylimit.Limiter[string] }

func TestAllPanicsOnProgrammingErrors(t *testing.T) {
	b := bucketsOn(t, keylimit.WithClock(newFastClock()), keylimit.PerHour(1))[0]
	require.PanicsWithValue(t, "keylimit: All needs at least one limiter", func() { keylimit.All[string]() })
	require.PanicsWithValue(t, "keylimit: All: limiter 1 is nil", func() { keylimit.All[string](b, nil) })
	require.Panics(t, func() { keylimit.All[string](notRefunder{b}, b) })
	require.NotPanics(t, func() { keylimit.All[string](b, notRefunder{b}) }, "the last limiter needs no Refund")
}

func TestAllAllocs(t *testing.T) {
	bs := bucketsOn(t, keylimit.WithClock(newFastClock()), keylimit.PerSecond(1_000_000), keylimit.PerSecond(2_000_000))
	lim := keylimit.All[string](bs[0], bs[1])
	lim.Allow("k")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("k") }))
}
