package redislimit

import (
	"math"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestLocalTimeIsClamped: local time follows the injected clock, back and
// forth, clamped so that a time plus two spans cannot wrap (issue 24.5: a
// backoff's end wrapped negative), and the monotonic clock leases also end
// on (issue 24.2) moves on whatever the injected clock does.
func TestLocalTimeIsClamped(t *testing.T) {
	mock := clock.NewMock()
	var c localClock
	c.init(mock)
	require.Zero(t, c.now(), "at the creation")
	mock.Add(time.Second)
	require.Equal(t, int64(time.Second), c.now(), "a second on")
	mock.Add(-time.Hour)
	require.Equal(t, int64(time.Second-time.Hour), c.now(), "the clock stepped back an hour")
	mock.Add(math.MinInt64)
	require.Equal(t, -maxSpan, c.now(), "292 years back")
	mock.Add(math.MaxInt64)
	mock.Add(math.MaxInt64)
	require.Equal(t, maxLocal, c.now(), "292 years on")
	require.LessOrEqual(t, c.now()+2*clampSpan(math.MaxInt64), int64(1)<<62, "a time and two spans")

	mono := c.monoNow()
	time.Sleep(time.Millisecond)
	require.Greater(t, c.monoNow(), mono, "the monotonic clock, with the injected one at its end")

	var sys localClock
	sys.init(nil)
	a := sys.now()
	time.Sleep(time.Millisecond)
	require.Greater(t, sys.now(), a, "the system clock")
}
