package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/keylimit/keylimit"
)

// Wait blocks until one event for key may happen, records it and returns
// nil. Wait is shorthand for WaitN(ctx, key, 1).
func (l *limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen across the fleet, and
// records them, as keylimit's WaitN does in process. It does not reserve:
// it asks (TakeContext), and if refused sleeps for RetryAfter and asks
// again, so a wait that fails has taken nothing; under contention from
// other instances it may be refused again after a sleep, and sleeps again.
//
// It fails at once, taking nothing, if n can never pass (an error wrapping
// keylimit.ErrExceedsLimit), or if the wait would outlast ctx's deadline
// (an error wrapping keylimit.ErrWouldExceedDeadline and
// context.DeadlineExceeded). It returns ctx's error, wrapped, if ctx ends
// first. While Redis fails, the failure policy answers, as for Take. It
// sleeps on the local clock (WithClock).
func (l *limiter) WaitN(ctx context.Context, key string, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("redislimit: wait for %d events: %w", n, err)
		}
		r, _ := l.TakeContext(ctx, key, n)
		if r.Allowed {
			return nil
		}
		if r.RetryAfter == keylimit.InfDuration {
			return fmt.Errorf("redislimit: %w: %d events can never pass a limit of %d at once", keylimit.ErrExceedsLimit, n, r.Limit)
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := time.Until(deadline); r.RetryAfter > left {
				return fmt.Errorf("redislimit: waiting %v for %d events: %w (%w, %v away)",
					r.RetryAfter, n, keylimit.ErrWouldExceedDeadline, context.DeadlineExceeded, max(left, 0))
			}
		}
		if err := l.clock.sleep(ctx, r.RetryAfter); err != nil {
			return fmt.Errorf("redislimit: wait for %d events: %w", n, err)
		}
	}
}
