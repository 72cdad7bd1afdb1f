package redislimit

import (
	"context"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// Wait blocks until one event for key may happen, records it and returns
// nil. Wait is shorthand for WaitN(ctx, key, 1).
func (l *limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen across the fleet, and
// records them: keylimit.WaitN, with each ask a TakeContext under ctx. It
// does not reserve: it asks, and if refused sleeps for RetryAfter (on the
// local clock, WithClock) and asks again, so a wait that fails has taken
// nothing; under contention from other instances it may be refused again
// after a sleep, and sleeps again.
//
// It fails at once, taking nothing, if n can never pass
// (keylimit.ErrExceedsLimit), or if the wait would outlast ctx's deadline
// (keylimit.ErrWouldExceedDeadline, which matches context.DeadlineExceeded
// too). It returns ctx's error, wrapped, if ctx ends first. While Redis
// fails, the failure policy answers, as for Take.
func (l *limiter) WaitN(ctx context.Context, key string, n int) error {
	return keylimit.WaitN[string](ctx, contextTaker{l, ctx}, key, n)
}

// contextTaker is the limiter's Take under one context, for keylimit.WaitN.
type contextTaker struct {
	l   *limiter
	ctx context.Context
}

// Clock is the limiter's local clock (WithClock), which the wait sleeps on;
// nil is the system clock.
func (t contextTaker) Clock() clock.Clock { return t.l.clock.injected }

func (t contextTaker) Take(key string, n int) keylimit.Result {
	r, _ := t.l.TakeContext(t.ctx, key, n)
	return r
}
