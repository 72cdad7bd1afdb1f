package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestTokenBucketSteps(t *testing.T) {
	// Capacity 5, one token a second.
	lim, mock := tokenBucket.mock(t, keylimit.PerSecond(1).WithBurst(5))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(5, 5, 0)},
		{0, "take", "a", 1, allowed(5, 4, 1*s)},
		{0, "take", "a", 4, allowed(5, 0, 5*s)},
		{0, "take", "a", 1, refused(5, 0, 1*s, 5*s)},
		{0, "take", "b", 2, allowed(5, 3, 2*s)}, // keys are independent
		{500 * ms, "take", "a", 1, refused(5, 0, 500*ms, 4500*ms)},
		{500 * ms, "peek", "a", 0, refused(5, 0, 500*ms, 4500*ms)},
		{1 * s, "take", "a", 1, allowed(5, 0, 5*s)},
		{1 * s, "take", "a", 2, refused(5, 0, 2*s, 5*s)},
		// Refill is continuous: at 3.5 s there are 2.5 tokens.
		{3500 * ms, "peek", "a", 0, allowed(5, 2, 2500*ms)},
		{3500 * ms, "take", "a", 2, allowed(5, 0, 4500*ms)},
		{3500 * ms, "take", "a", 1, refused(5, 0, 500*ms, 4500*ms)},
		// The refused calls above took nothing: full at exactly 8 s.
		{8 * s, "peek", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 6, refused(5, 5, keylimit.InfDuration, 0)},
		{20 * s, "take", "a", -1, refused(5, 5, keylimit.InfDuration, 0)},
		{20 * s, "take", "a", 5, allowed(5, 0, 5*s)},
		{20 * s, "reset", "a", 0, keylimit.Result{}},
		{20 * s, "peek", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 5, allowed(5, 0, 5*s)},
		{20 * s, "peek", "never-seen", 0, allowed(5, 5, 0)},
	})
	require.Equal(t, 2, lim.Stats().Keys, "peek and refused calls create no key")
}

func TestTokenBucketFractionalRefillIsNeverLost(t *testing.T) {
	// 4 a second is one token every 250 ms. Asking every 100 ms, a refill
	// computed as floor(elapsed × rate) with the timestamp reset at each call
	// adds 0 every time and admits only the first burst. Continuous refill
	// admits the burst plus exactly one per 250 ms.
	l := keylimit.PerSecond(4)
	lim, mock := tokenBucket.mock(t, l)
	admitted := 0
	for at := time.Duration(0); at <= 10*s; at += 100 * ms {
		if lim.Allow("k") {
			admitted++
		}
		mock.Add(100 * ms)
	}
	require.Equal(t, l.BurstSize()+int(10*s/l.WithBurst(1).FillTime()), admitted)
}

func TestTokenBucketExactUnderContentionMovingClock(t *testing.T) {
	// Goroutines hammer one key while they also move the clock forward, in
	// steps that are not a multiple of the interval. Each admission is known
	// to have been decided between two clock readings, before and after the
	// call; for any admissions i <= j (ordered by their before-readings),
	// the admissions decided between before_i and after_j must fit in
	// Burst + (after_j - before_i) / Interval.
	l := keylimit.Per(10, s).WithBurst(20)
	clk := newFastClock()
	lim := tokenBucket.on(t, clk, l)
	t0 := clk.Now()
	adms, _ := hammer(t, lim, clk, 16, 40, 7*ms, 20*s, nil)
	bound := l.BurstSize() + int(clk.Now().Sub(t0)/l.WithBurst(1).FillTime())
	require.LessOrEqual(t, len(adms), bound)
	require.Greater(t, len(adms), bound/2, "the limiter admits as the clock moves")
	checkBucketBound(t, adms, l.BurstSize(), l.WithBurst(1).FillTime())
}

func TestTokenBucketSetLimitKeepsDebtInTokens(t *testing.T) {
	clk := newFastClock()
	lim := tokenBucket.on(t, clk, keylimit.PerSecond(1).WithBurst(10))
	require.True(t, lim.AllowN("k", 10)) // owes 10 tokens: 10 s

	// Raised: the 10 tokens owed are 10 × 100 ms now, of a burst of 20.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(10).WithBurst(20)))
	require.Equal(t, keylimit.PerSecond(10).WithBurst(20), lim.Limit())
	r := lim.Peek("k")
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 20, Remaining: 10, ResetAfter: time.Second, RefillAfter: 100 * time.Millisecond}, r)
	require.True(t, lim.AllowN("k", 10))
	require.False(t, lim.Allow("k"))
	require.Equal(t, 20, lim.Peek("new").Remaining, "a new key gets the new burst")

	// Lowered: 20 tokens owed at 1 s each, beyond the new burst of 3: the
	// key waits for 18 of them before its next event.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(1).WithBurst(3)))
	r = lim.Take("k", 1)
	require.Equal(t, keylimit.Result{Limit: 3, RetryAfter: 18 * time.Second, ResetAfter: 20 * time.Second, RefillAfter: 18 * time.Second}, r)
	clk.Add(18*time.Second - time.Nanosecond)
	require.False(t, lim.Allow("k"))
	clk.Add(time.Nanosecond)
	require.True(t, lim.Allow("k"))
}

func TestTokenBucketKeyTypes(t *testing.T) {
	type client struct {
		id   int
		zone string
	}
	mock := clock.NewMock()
	lim := build(t, keylimit.NewTokenBucket[client], keylimit.PerMinute(2), keylimit.WithClock(mock))
	a, b := client{1, "eu"}, client{1, "us"}
	require.True(t, lim.AllowN(a, 2))
	require.False(t, lim.Allow(a))
	require.True(t, lim.Allow(b))
	var _ keylimit.Limiter[client] = lim
}

// hookClock returns its time, and runs hook (once) inside the first Now
// call after it is set: a way to slip another caller's admission between a
// clock read and the CAS it serves.
type hookClock struct {
	*fastClock
	hook func()
}

func (c *hookClock) Now() time.Time {
	now := c.fastClock.Now()
	if h := c.hook; h != nil {
		c.hook = nil
		h()
	}
	return now
}

// TestTokenBucketStaleClockReadIsReread: a caller whose clock read a
// concurrent admission overtook, and which falls short by less than a
// microsecond only because of that, reads the clock again and passes,
// instead of being refused on a time already past.
func TestTokenBucketStaleClockReadIsReread(t *testing.T) {
	clk := &hookClock{fastClock: newFastClock()}
	lim := tokenBucket.make(t, keylimit.Per(2, 2*ms), keylimit.WithClock(clk), keylimit.WithEvictionInterval(0))
	clk.Add(10 * ms)
	clk.hook = func() {
		clk.Add(500 * time.Nanosecond)
		require.True(t, lim.Allow("k"), "the caller that overtakes")
	}
	require.True(t, lim.Allow("k"), "the overtaken caller: one token was left when it decided")
	require.False(t, lim.Allow("k"), "and none after it")
}
