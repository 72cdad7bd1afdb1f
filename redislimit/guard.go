package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// guard is the failure policy around the script call: it asks Redis through
// the store unless Redis failed less than the failure backoff ago, tells
// the observers how each round trip went, and when a call fails answers by
// the policy (FailOpen, FailClosed, or the FailLocal fallback limiter).
type guard struct {
	store   *store
	ops     *ops
	policy  FailurePolicy
	backoff time.Duration // after failures in a row, how long not to ask Redis
	onError func(error)   // nil: errors are only returned
	// downUntil is the local time (ns) before which Redis is not asked,
	// because it failed less than the backoff ago; 0 while it works. Stored
	// by every call that sees Redis fail.
	downUntil atomic.Int64
	// failing counts the failures since Redis last answered, up to
	// backoffSteps: the backoff a failure starts grows with it (trip).
	failing atomic.Int32
	// clock is the limiter's (both constructors set it): a backoff counts
	// from when the failure was seen, not from the failed call's start (a
	// timeout lasts as long as a short backoff).
	clock *localClock
	// fallback decides while Redis fails, under FailLocal; nil otherwise.
	fallback keylimit.Limiter[string]
	// fleet learns the live fleet's size, under the default policy (and
	// unless the tests turned announcements off); nil otherwise.
	fleet *fleet
}

// instances is how many instances the fallback shares the limit with: the
// policy's, or the live fleet's size as last learned.
func (g *guard) instances() int {
	if g.fleet != nil {
		return g.fleet.instances()
	}
	return g.policy.instances
}

// take asks Redis for n events (n >= 1) for key under k at local time now,
// in one script call, and returns what an admission took. If the call
// fails the policy answers, and err says why: a Result with a nil err is
// Redis's.
func (g *guard) take(ctx context.Context, key string, n int, k *keyLimit, now int64) (keylimit.Result, keylimit.Admission, error) {
	var res [1]keylimit.Result
	var marks [1]int64
	if err := g.callOne(ctx, modeTake, key, n, k, 0, now, res[:], marks[:]); err != nil {
		return g.failed(ctx, "take", key, k, n, err)
	}
	r := res[0]
	if !r.Allowed {
		return r, keylimit.Admission{}, nil
	}
	return r, keylimit.Admission{N: n, Mark: marks[0], By: k}, nil
}

// peek asks Redis for key's state under k at local time now; if the call
// fails the policy answers, as for take.
func (g *guard) peek(ctx context.Context, key string, k *keyLimit, now int64) (keylimit.Result, error) {
	var res [1]keylimit.Result
	var marks [1]int64
	if err := g.callOne(ctx, modePeek, key, 1, k, 0, now, res[:], marks[:]); err != nil {
		r, _, err := g.failed(ctx, "peek", key, k, 0, err)
		return r, err
	}
	return res[0], nil
}

// refund gives back n events (at most k's quota) of an admission under k
// marked mark, for key, at local time now, in one script call. If Redis
// fails the error is reported; nothing else answers for a refund.
func (g *guard) refund(ctx context.Context, key string, n int, k *keyLimit, mark, now int64) error {
	var res [1]keylimit.Result
	var marks [1]int64
	if err := g.callOne(ctx, modeRefund, key, n, k, mark, now, res[:], marks[:]); err != nil {
		return g.report("refund", key, err)
	}
	return nil
}

// reset forgets key in the fallback and, unless ctx has ended, deletes its
// state in Redis at local time now: even during the backoff, since a lost
// Reset would go unnoticed (a user locked out after a successful login).
func (g *guard) reset(ctx context.Context, key string, now int64) error {
	g.forget(key)
	if err := ctx.Err(); err != nil {
		return g.report("reset", key, err)
	}
	err := g.store.del(ctx, g.store.redisKey(key))
	g.observe(ctx, err, now)
	if err != nil {
		return g.report("reset", key, err)
	}
	return nil
}

// forget forgets key in the fallback, if any.
func (g *guard) forget(key string) {
	if g.fallback != nil {
		g.fallback.Reset(key)
	}
}

// callOne makes one script call for key under k alone, as call does. mark
// is the admission a refund gives back.
func (g *guard) callOne(ctx context.Context, mode any, key string, n int, k *keyLimit, mark, now int64,
	res []keylimit.Result, marks []int64) error {
	parts := [1]*keyLimit{k}
	in := [1]int64{mark}
	d := decision{key: key, n: n, parts: parts[:], marks: in[:]}
	return g.call(ctx, mode, &d, now, res, marks)
}

// call makes the script call d in mode at local time now, unless Redis
// failed less than the backoff ago, and tells the observers how it went.
func (g *guard) call(ctx context.Context, mode any, d *decision, now int64, res []keylimit.Result, marks []int64) error {
	if err := g.down(now); err != nil {
		return err
	}
	err := g.store.run(ctx, mode, d, res, marks)
	g.observe(ctx, err, now)
	return err
}

// down returns ErrUnavailable if Redis failed less than the backoff before
// local time now. (0 is "never failed": an injected clock stepped back
// before the limiter's creation reads a negative now.)
func (g *guard) down(now int64) error {
	if until := g.downUntil.Load(); until != 0 && now < until {
		return ErrUnavailable
	}
	return nil
}

// observe follows a round trip made at local time now under the caller's
// ctx that returned err: a failure starts the backoff (trip), and the
// observers count it and follow Redis's health.
func (g *guard) observe(ctx context.Context, err error, now int64) {
	g.observeShared(ctx, err, now)
	g.ops.counted(err)
}

// observeShared is observe for a round trip that another limiter counts
// (a joined call, which the first limiter's Stats count): the backoff and
// Redis's health follow it, and the counts do not.
func (g *guard) observeShared(ctx context.Context, err error, now int64) {
	if err != nil {
		g.trip(ctx, err, now)
	} else {
		if g.failing.Load() != 0 { // loaded first: most calls find 0, and write nothing
			g.failing.Store(0)
		}
		if g.fleet != nil {
			g.fleet.answered(now)
		}
	}
	g.ops.called(ctx, err, now)
}

// trip starts the backoff after err, a failure of a call made at local time
// now with the caller's context ctx, unless the failure says nothing about
// Redis: an error reply (Redis is up and answered) or the caller's own
// context ending. The first failure after an answer starts a sixteenth of
// the backoff, the second in a row a quarter, the third and later all of
// it: a lone timeout while Redis answers (a lost packet, a slow command)
// leaves the instance to its policy for 62 ms by default, not a second,
// in which its share is decided twice (on Redis by the others, here by
// the policy); an outage still costs a timeout a backoff once it lasts.
func (g *guard) trip(ctx context.Context, err error, now int64) {
	var reply redis.Error
	if g.backoff <= 0 || ctx.Err() != nil || (errors.As(err, &reply) && !errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	k := g.failing.Add(1)
	if k > backoffSteps {
		g.failing.Store(backoffSteps) // saturated, whatever the calls that fail at once
		k = backoffSteps
	}
	now = max(now, g.clock.now())
	// Saturated: a backoff of math.MaxInt64 is about 36 years, not a time
	// before now.
	g.downUntil.Store(now + clampSpan(g.backoff>>(2*(backoffSteps-k))))
}

// backoffSteps is how many failures in a row reach the whole backoff: the
// first waits backoff/16, the second backoff/4.
const backoffSteps = 3

// failed reports err and answers a request of n events (0 for Peek) for
// key, under k, by the failure policy, with the fallback's Admission when it
// admits (FailOpen admits without taking: there is nothing to give back).
// If the caller cancelled ctx, the decision is abandoned instead: refused,
// with nothing taken and no policy asked, as when ctx had ended before the
// call. A deadline that passed is a budget spent, not a caller gone: the
// policy answers, as it does at the limiter's own timeout.
func (g *guard) failed(ctx context.Context, op, key string, k *keyLimit, n int, err error) (keylimit.Result, keylimit.Admission, error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return keylimit.Result{Limit: k.quota}, keylimit.Admission{}, g.report(op, key, fmt.Errorf("%w (the call: %w)", ctx.Err(), err))
	}
	if errors.Is(err, ErrScript) {
		// A bug or an incompatibility, not an outage: refused, as under
		// FailClosed, whatever the policy; one that admits, or a fallback
		// that decides, would hide it.
		err = g.report(op, key, err)
		rc := k.retryClosed
		return keylimit.Result{Limit: k.quota, RetryAfter: rc, ResetAfter: rc, RefillAfter: rc, Err: err}, keylimit.Admission{}, err
	}
	g.ops.counts.stripe().fallbacks.Add(1)
	err = g.report(op, key, err)
	if r, ok := g.policy.decide(k.quota, n, k.retryClosed, true); ok {
		return r, keylimit.Admission{}, err
	}
	if n == 0 {
		return g.fallback.Peek(key), keylimit.Admission{}, err
	}
	r, a := g.fallback.(keylimit.Refunder[string]).Admit(key, n)
	if r.RetryAfter == keylimit.InfDuration {
		// n is above the fallback's share of the quota, but not above the
		// quota: it can pass once Redis is back, which is asked again after
		// the backoff.
		r.RetryAfter = max(g.backoff, k.retryClosed)
	}
	return r, a, err
}

// refundFallback gives a back to the fallback limiter, if the fallback made
// it (Redis was failing then); any other Admission gives nothing.
func (g *guard) refundFallback(key string, a keylimit.Admission) {
	if r, ok := g.fallback.(keylimit.Refunder[string]); ok && a.By == g.fallback {
		r.Refund(key, a)
	}
}

// limitChanged gives the fallback its share of l, the limiter's new limit.
func (g *guard) limitChanged(l keylimit.Limit) {
	if s, ok := g.fallback.(interface{ SetLimit(keylimit.Limit) error }); ok {
		// The fallback takes every share of a limit this limiter takes.
		_ = s.SetLimit(g.policy.share(l, g.instances()))
	}
}

// keyLimitChanged gives the fallback each key's share of fn's limits (nil:
// every key under the fallback's own limit again).
func (g *guard) keyLimitChanged(fn func(string) keylimit.Limit) {
	if s, ok := g.fallback.(interface {
		SetKeyLimit(func(string) keylimit.Limit) error
	}); ok {
		var share func(string) keylimit.Limit
		if fn != nil {
			share = g.policy.fallbackKeyLimit(fn, g.instances())
		}
		_ = s.SetKeyLimit(share)
	}
}

// close withdraws the instance from the live fleet, and releases the
// fallback limiter, if any.
func (g *guard) close() error {
	g.ops.closeChecks()
	if g.fleet != nil {
		g.fleet.close()
	}
	if c, ok := g.fallback.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// report wraps err in an *Error and passes it to the OnError callback,
// unless Redis was not asked.
func (g *guard) report(op, key string, err error) error {
	e := &Error{Op: op, Key: key, Err: err}
	if g.onError != nil && err != ErrUnavailable {
		g.onError(e)
	}
	return e
}
