package redislimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// FailurePolicy is what a limiter answers while Redis fails: when a script
// call returns an error or outlasts its deadline. Make one with FailOpen,
// FailClosed or FailLocal; the zero value is not a policy.
//
// Whatever the policy, the error is passed to the WithOnError callback and
// returned by the methods that return errors. For the failure backoff
// (WithFailureBackoff) that follows, decisions are answered by the policy
// without asking Redis; then Redis is asked again.
type FailurePolicy struct {
	kind      failKind
	instances int   // FailLocal: the expected number of instances
	err       error // an invalid FailLocal argument, reported by the constructor
}

type failKind int

const (
	failOpen failKind = iota + 1
	failClosed
	failLocal
)

// FailOpen admits every request while Redis fails: availability first, and
// no limit at all across the fleet. The Result is Allowed with the full
// quota Remaining, as for a new key.
func FailOpen() FailurePolicy { return FailurePolicy{kind: failOpen} }

// FailClosed refuses every request while Redis fails: protection first, and
// nothing admitted across the fleet. The
// Result is refused with Remaining 0, and RetryAfter and ResetAfter the
// limit's interval (Period / Events). Redis is asked again once the failure
// backoff has passed (WithFailureBackoff), which may be later.
func FailClosed() FailurePolicy { return FailurePolicy{kind: failClosed} }

// FailLocal decides in process while Redis fails, with a keylimit limiter of
// the same algorithm whose quota is the limit divided by instances, the
// number of instances expected to share the load: a fleet of N then admits
// up to N/instances times the limit (Events and Burst are divided rounding
// down, never below 1). FailLocal(1), the default without WithFleetSize,
// gives each instance the whole limit: a fleet of N admits N times it. A
// share above what the in-memory type takes falls back to the nearest type
// that takes it (a SlidingCounter, then a TokenBucket of the same rate). The
// fallback keeps its state between outages; Close releases it.
func FailLocal(instances int) FailurePolicy {
	if instances < 1 {
		return FailurePolicy{kind: failLocal, err: fmt.Errorf("redislimit: FailLocal(%d): instances is below 1", instances)}
	}
	return FailurePolicy{kind: failLocal, instances: instances}
}

// String describes p: "fail open", "fail closed", "fail local/3".
func (p FailurePolicy) String() string {
	switch p.kind {
	case failOpen:
		return "fail open"
	case failClosed:
		return "fail closed"
	case failLocal:
		return fmt.Sprintf("fail local/%d", p.instances)
	}
	return "no failure policy"
}

// share divides l among p.instances for the fallback limiter.
func (p FailurePolicy) share(l keylimit.Limit) keylimit.Limit {
	if p.instances <= 1 {
		return l
	}
	s := keylimit.Per(max(l.Events/p.instances, 1), l.Period)
	if b := l.BurstSize(); b != l.Events {
		s = s.WithBurst(max(b/p.instances, 1))
	}
	return s
}

// ErrUnavailable is the error of a call that did not ask Redis because Redis
// failed less than the failure backoff ago (see WithFailureBackoff). It is
// returned wrapped in an *Error, and not passed to WithOnError, which sees
// the failures themselves.
var ErrUnavailable = errors.New("redislimit: Redis failed within the failure backoff, not asked")

// down returns ErrUnavailable if Redis failed less than the backoff before
// local time now. (0 is "never failed": an injected clock stepped back
// before the limiter's creation reads a negative now.)
func (l *limiter) down(now int64) error {
	if until := l.downUntil.Load(); until != 0 && now < until {
		return ErrUnavailable
	}
	return nil
}

// trip starts the backoff after err, a failure of a call made at local time
// now with the caller's context ctx, unless the failure says nothing about
// Redis: an error reply (Redis is up and answered) or the caller's own
// context ending.
func (l *limiter) trip(ctx context.Context, err error, now int64) {
	var reply redis.Error
	if l.backoff <= 0 || ctx.Err() != nil || (errors.As(err, &reply) && !errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	l.downUntil.Store(now + int64(l.backoff))
}

// failed reports err and answers a request of n events (0 for Peek) for
// key, under k, by the failure policy, with the fallback's Admission when it
// admits (FailOpen admits without taking: there is nothing to give back).
// If the caller cancelled ctx, the decision is abandoned instead: refused,
// with nothing taken and no policy asked, as when ctx had ended before the
// call. A deadline that passed is a budget spent, not a caller gone: the
// policy answers, as it does at the limiter's own timeout.
func (l *limiter) failed(ctx context.Context, op, key string, k *keyLimit, n int, err error) (keylimit.Result, keylimit.Admission, error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return keylimit.Result{Limit: k.quota}, keylimit.Admission{}, l.report(op, key, fmt.Errorf("%w (the call: %w)", ctx.Err(), err))
	}
	l.ops.counts.stripe().fallbacks.Add(1)
	err = l.report(op, key, err)
	q := k.quota
	switch l.policy.kind {
	case failOpen:
		return keylimit.Result{Allowed: true, Limit: q, Remaining: q - n}, keylimit.Admission{}, err
	case failClosed:
		rc := k.retryClosed
		return keylimit.Result{Limit: q, RetryAfter: rc, ResetAfter: rc}, keylimit.Admission{}, err
	}
	if n == 0 {
		return l.fallback.Peek(key), keylimit.Admission{}, err
	}
	r, a := l.fallback.(keylimit.Refunder[string]).Admit(key, n)
	if r.RetryAfter == keylimit.InfDuration {
		// n is above the fallback's share of the quota, but not above the
		// quota: it can pass once Redis is back, which is asked again after
		// the backoff.
		r.RetryAfter = max(l.backoff, k.retryClosed)
	}
	return r, a, err
}

// report wraps err in an *Error and passes it to the OnError callback,
// unless Redis was not asked.
func (l *limiter) report(op, key string, err error) error {
	e := &Error{Op: op, Key: key, Err: err}
	if l.onError != nil && err != ErrUnavailable {
		l.onError(e)
	}
	return e
}

// Error is the error of a Redis call that failed: the one passed to the
// WithOnError callback and returned by TakeContext, PeekContext,
// ResetContext and RefundContext.
type Error struct {
	Op  string // "take", "peek", "reset" or "refund"
	Key string // the key, without the prefix
	Err error  // what the client returned: a timeout, a network error, a Redis error
}

func (e *Error) Error() string {
	return fmt.Sprintf("redislimit: %s %.64q: %v", e.Op, e.Key, e.Err) // a key may come from a request: 64 runes of it
}

// Unwrap returns e.Err, so that errors.Is(err, context.DeadlineExceeded)
// tells a timeout.
func (e *Error) Unwrap() error { return e.Err }
