package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestWaitN: Wait sleeps until Redis admits, then has taken the event;
// requests that can never pass, or not before the deadline, fail at once
// and take nothing; a cancelled context ends the wait.
func TestWaitN(t *testing.T) {
	lim, err := redislimit.NewTokenBucket(shared.client(t), "test", keylimit.PerSecond(20).WithBurst(1), redislimit.WithTimeout(patient))
	require.NoError(t, err, "NewTokenBucket")
	ctx := context.Background()
	key := testKey(t, "k")
	lim.Allow(key)
	require.NoError(t, lim.Wait(ctx, key), "Wait for a token 50ms away")
	r := lim.Peek(key)
	require.False(t, r.Allowed, "Peek after Wait, with the token taken: allowed, in %+v", r)
	require.ErrorIs(t, lim.WaitN(ctx, key, 2), keylimit.ErrExceedsLimit, "WaitN(2) with a burst of 1")

	slow, err := redislimit.NewFixedWindow(shared.client(t), "test", keylimit.PerHour(1), redislimit.WithTimeout(patient))
	require.NoError(t, err, "NewFixedWindow")
	slow.Allow(key)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = slow.Wait(short, key)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline, "Wait an hour with 100ms left")
	require.ErrorIs(t, err, context.DeadlineExceeded, "Wait an hour with 100ms left")
	require.NoError(t, short.Err(), "the context of a Wait an hour with 100ms left, when it returned: it should return at once")
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	require.ErrorIs(t, slow.Wait(cancelled, key), context.Canceled, "Wait with a cancelled context")
}
