package redislimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestWaitN: Wait sleeps until Redis admits, then has taken the event;
// requests that can never pass, or not before the deadline, fail at once
// and take nothing; a cancelled context ends the wait.
func TestWaitN(t *testing.T) {
	lim, err := redislimit.NewTokenBucket(shared.client(t), "test", keylimit.PerSecond(20).WithBurst(1), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := testKey(t, "k")
	lim.Allow(key)
	if err := lim.Wait(ctx, key); err != nil {
		t.Fatalf("Wait for a token 50ms away: %v", err)
	}
	if r := lim.Peek(key); r.Allowed {
		t.Fatalf("after Wait: %+v, want the token taken", r)
	}
	if err := lim.WaitN(ctx, key, 2); !errors.Is(err, keylimit.ErrExceedsLimit) {
		t.Fatalf("WaitN(2) with a burst of 1: %v, want ErrExceedsLimit", err)
	}

	slow, err := redislimit.NewFixedWindow(shared.client(t), "test", keylimit.PerHour(1), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	slow.Allow(key)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = slow.Wait(short, key)
	if !errors.Is(err, keylimit.ErrWouldExceedDeadline) || !errors.Is(err, context.DeadlineExceeded) || short.Err() != nil {
		t.Fatalf("Wait an hour with 100ms left: %v, want at once an error matching ErrWouldExceedDeadline and DeadlineExceeded", err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := slow.Wait(cancelled, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v, want context.Canceled", err)
	}
}
