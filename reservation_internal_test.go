package keylimit

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestReserveN: a reservation, the turn a TokenBucket's waiter takes, takes
// its tokens at once and says when they may be used; it never reaches
// further than the waiter allows; cancel gives back what later reservations
// leave, once.
func TestReserveN(t *testing.T) {
	const ms = time.Millisecond
	mock := clock.NewMock()
	b, err := NewTokenBucket[string](PerSecond(10), WithClock(mock))
	require.NoError(t, err)
	defer b.Close()
	r := b.reserveN("k", 10, 0)
	require.True(t, r.ok)
	require.Zero(t, r.delay())
	r2 := b.reserveN("k", 2, time.Second)
	require.True(t, r2.ok)
	require.Equal(t, 200*ms, r2.delay())
	require.Equal(t, Result{Allowed: true, Limit: 10, ResetAfter: 1200 * ms, RefillAfter: 300 * ms}, r2.res)
	r3 := b.reserveN("k", 1, 250*ms)
	require.False(t, r3.ok, "300 ms is beyond the 250 ms allowed")
	require.Equal(t, InfDuration, r3.delay())
	require.Equal(t, 300*ms, r3.res.RetryAfter)
	require.Equal(t, InfDuration, b.reserveN("k", 11, time.Hour).res.RetryAfter, "more than the burst: never")

	r4 := b.reserveN("k", 1, time.Second) // behind r2: at 300 ms
	require.Equal(t, 300*ms, r4.delay())
	r2.cancel()
	r2.cancel() // once
	require.Equal(t, 200*ms, b.reserveN("k", 1, time.Second).delay(), "r2's 2 tokens came back: the next comes at 200 ms, in r2's place (r4 keeps its 300 ms)")
	mock.Add(time.Hour)
	r4.cancel() // long after its time: its token refilled anyway, nothing to give
	require.Equal(t, 10, b.Peek("k").Remaining)
}
