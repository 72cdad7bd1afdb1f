package keylimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// ErrWouldExceedDeadline is wrapped by the error of a Wait that fails at once
// because the time it would have to wait outlasts its context's deadline. It
// matches context.DeadlineExceeded with errors.Is, since the outcome is the
// same: the deadline would have passed first.
var ErrWouldExceedDeadline = errors.New("keylimit: wait would outlast the context deadline")

// deadlineError says how long the wait would have been.
type deadlineError struct {
	n          int
	wait, left time.Duration
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("keylimit: waiting %v for %s would outlast the context deadline, %v away",
		e.wait, events(e.n), e.left)
}

func (e *deadlineError) Is(target error) bool {
	return target == ErrWouldExceedDeadline || target == context.DeadlineExceeded
}

// events formats a count of events: "1 event", "3 events".
func events(n int) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}

// WaitN blocks until lim admits n events for key, and takes them. A lim
// with a WaitN method of its own waits by it: every limiter of this module
// and of redislimit has one (a TokenBucket serves waiters first come, first
// served), and so has a combination made by All. Any other lim, such as a
// view of your own with only a Take method, is polled: asked (under ctx if
// it has a TakeContext method, as a ContextLimiter has), and when refused,
// asked again after the Result's RetryAfter, slept on lim's clock if it has
// one of its own and on the system clock otherwise. Under contention such a waiter
// may sleep more than once.
//
// Like the methods, it fails at once, taking nothing, if n can never pass
// (ErrExceedsLimit) or if the wait would outlast ctx's deadline
// (ErrWouldExceedDeadline), and returns ctx's error, wrapped, if ctx ends
// first.
func WaitN[K comparable](ctx context.Context, lim interface{ Take(key K, n int) Result }, key K, n int) error {
	if w, ok := lim.(interface {
		WaitN(ctx context.Context, key K, n int) error
	}); ok {
		return w.WaitN(ctx, key, n)
	}
	return waitN[K](ctx, lim, clockOf(lim), key, n)
}

// systemClock is the system's clock, for limiters without one of their own.
var systemClock = clock.New()

// clockOf returns the clock l reads: its own, WithClock's (every limiter of
// this module, and a combination made by All, has a timers method; a
// limiter of another package may have a Clock method), else the system
// clock. WaitN
// sleeps on it when it polls l, and measures the context's deadline by it.
func clockOf(l any) clock.Clock {
	var clk clock.Clock
	switch c := l.(type) {
	case interface{ timers() clock.Clock }:
		clk = c.timers()
	case interface{ Clock() clock.Clock }:
		clk = c.Clock()
	}
	if clk == nil {
		return systemClock
	}
	return clk
}

// waitN is WaitN for the window types, and for any limiter. It does not
// reserve: it asks, and if refused, sleeps for RetryAfter and asks again, so
// a wait that fails or is cancelled has taken nothing. Under contention a
// waiter may be refused again after its sleep (another caller took the
// capacity); it then sleeps again.
func waitN[K comparable](ctx context.Context, lim taker[K], timers clock.Clock, key K, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
		}
		// A failure policy's answer is as good as a decision here: its
		// error is not the wait's.
		r, _ := takeContext(ctx, lim, key, n)
		if r.Allowed {
			return nil
		}
		if r.Err != nil {
			return r.Err
		}
		if r.RetryAfter == InfDuration {
			return fmt.Errorf("%w: %s can never pass a limit of %d at once", ErrExceedsLimit, events(n), r.Limit)
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := deadline.Sub(timers.Now()); r.RetryAfter > left {
				return &deadlineError{n: n, wait: r.RetryAfter, left: max(left, 0)}
			}
		}
		if err := sleep(ctx, timers, r.RetryAfter); err != nil {
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
		}
	}
}

// sleep waits d on the timers of the limiter's clock, or until ctx ends.
func sleep(ctx context.Context, timers clock.Clock, d time.Duration) error {
	t := timers.Timer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
