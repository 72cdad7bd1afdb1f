package keylimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// TestWaitNOnAll waits on a combination, which has no Wait method of its own:
// 1/s and 2/min on one key. The second event waits for the per-second limit,
// the third for the per-minute one.
func TestWaitNOnAll(t *testing.T) {
	mock := clock.NewMock()
	bs := bucketsOn(t, keylimit.WithClock(mock), keylimit.PerSecond(1), keylimit.PerMinute(2))
	lim := keylimit.All[string](bs[0], bs[1])
	t0 := mock.Now()
	ctx := context.Background()

	require.NoError(t, keylimit.WaitN(ctx, lim, "k", 1, mock))
	require.Equal(t, t0, mock.Now(), "no wait while both admit")

	done := make(chan struct{})
	var err error
	go func() { defer close(done); err = keylimit.WaitN(ctx, lim, "k", 1, mock) }()
	advanceUntil(t, mock, 100*ms, done)
	require.NoError(t, err)
	require.Equal(t, 1*s, mock.Now().Sub(t0), "the second event waits for the 1/s limit")

	// The per-minute limit (burst 2, a token every 30 s) has its next token
	// at 30 s, 29 s from now: a deadline before that fails
	// at once, taking nothing from either limiter.
	dctx, cancel := mock.WithTimeout(ctx, 10*s)
	defer cancel()
	err = keylimit.WaitN(dctx, lim, "k", 1, mock)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorContains(t, err, "waiting 29s for 1 event would outlast the context deadline, 10s away")
	require.Equal(t, 1*s, mock.Now().Sub(t0), "a wait that fails at once does not sleep")
	mock.Add(29 * s)
	require.True(t, lim.Allow("k"), "the failed wait took nothing: the token is there at 30 s")

	require.ErrorIs(t, keylimit.WaitN(ctx, lim, "k", 3, mock), keylimit.ErrExceedsLimit)
}

// TestWaitNSystemClock: a nil clock is the system clock.
func TestWaitNSystemClock(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.Per(1, 20*time.Millisecond))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.Allow("k"))
	start := time.Now()
	require.NoError(t, keylimit.WaitN(context.Background(), keylimit.Limiter[string](lim), "k", 1, nil))
	require.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "the wait slept until the token came back")
}
