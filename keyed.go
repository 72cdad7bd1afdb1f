package keylimit

import (
	"context"

	"github.com/benbjohnson/clock"
)

// Keyed is what the four in-memory rate limiters share: the limits their
// keys are under, a key's state without a decision, refunds, waiting and
// the limiter's lifetime. TokenBucket, FixedWindow, SlidingWindow and
// SlidingCounter embed it, and each decides Allow, AllowN and Take by its
// own algorithm. A Keyed is made by their constructors only; its zero value
// is not usable.
type Keyed[K comparable] struct {
	of keyedLimiter[K] // the limiter that embeds this Keyed, for the cold methods
	// The same limiter, as the concrete type of its engine, for the hot
	// methods (Peek, Admit, Refund, WaitN): exactly one is set. A call
	// through of is an interface call into a generic method, by way of its
	// dictionary wrapper, about 190 instructions of Admit's (issue 36);
	// these are direct calls.
	bucket  *TokenBucket[K]
	window  *windowLimiter[K] // a FixedWindow's or a SlidingCounter's
	sliding *SlidingWindow[K]
}

// keyedLimiter is what each limiter type gives its Keyed for the methods
// off the hot path: the parts of a method that depend on its algorithm.
type keyedLimiter[K comparable] interface {
	resetKey(key K)
	limits() keyLimits[K]
	stats() Stats
	timers() clock.Clock
	stop()
}

// keyLimits is a limiter's policy, whatever the arithmetic of its limits.
type keyLimits[K comparable] interface {
	limit() Limit
	limitOf(key K) Limit
	set(l Limit) error
	setKeyLimit(f func(K) Limit) error
}

// Limit returns the limiter's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by SetKeyLimit are not under it.
func (k *Keyed[K]) Limit() Limit { return k.of.limits().limit() }

// LimitOf returns the limit key is under now: its own, from SetKeyLimit, or
// the limiter's. It creates no key.
func (k *Keyed[K]) LimitOf(key K) Limit { return k.of.limits().limitOf(key) }

// SetLimit makes l the limiter's limit, and has every key resolve its limit
// again (SetKeyLimit's function is asked anew), each from its next call. It
// returns an error, and changes nothing, if l is invalid for the limiter.
//
// A key keeps what it used: a bucket its debt in tokens, a window the count
// of its current window, a sliding log its admission times. So a change
// never creates capacity; each limiter type's doc states the bound it keeps
// however often the limit changes. Decisions racing with SetLimit are made
// under one limit or the other, never a mix.
func (k *Keyed[K]) SetLimit(l Limit) error { return k.of.limits().set(l) }

// SetKeyLimit gives each key its own limit: f(key), asked when a key is next
// seen (and again after SetLimit). A zero Limit{} from f means the limiter's
// own limit; a nil f puts every key under it again. One limiter so serves
// several tiers. Call it right after the constructor, before the limiter
// serves, for the tiers to hold from the first request; called later, every
// key moves to its new limit on its next call and keeps what it used, as
// with SetLimit. f is called from many goroutines at once and must not call
// the limiter. If f returns an invalid Limit, that key's requests are
// refused and their Result.Err says why.
func (k *Keyed[K]) SetKeyLimit(f func(key K) Limit) error { return k.of.limits().setKeyLimit(f) }

// Peek reports key's state now without recording anything: Allowed tells
// whether Allow(key) would pass, RetryAfter how long until it would. Peek
// does not create the key.
func (k *Keyed[K]) Peek(key K) (r Result) {
	k.peek(key, &r)
	return // naked, as Admit's
}

// peek is Peek, writing its Result to r, a zero Result (see admit).
func (k *Keyed[K]) peek(key K, r *Result) {
	switch {
	case k.bucket != nil:
		k.bucket.peekKey(key, r)
	case k.window != nil:
		k.window.peekTo(key, r)
	default:
		k.sliding.peekKey(key, r)
	}
}

// Admit is Take, and also returns what an admission took, for Refund. The
// once an admission's copies share is one bit of a 16-byte block, which
// Admit allocates once every 64 admissions.
func (k *Keyed[K]) Admit(key K, n int) (r Result, a Admission) {
	k.admit(key, n, &r, &a)
	return // naked: return r, a copies both once more
}

// admit is Admit, writing its Result and Admission to r and a: a call small
// enough for the wrapper each limiter type has of Admit to inline, so that
// the two, 160 bytes, are not returned through one more frame.
func (k *Keyed[K]) admit(key K, n int, r *Result, a *Admission) {
	switch {
	case k.bucket != nil:
		k.bucket.admit(key, n, a, &k.bucket.keys.onces, r)
	case k.window != nil:
		k.window.admit(key, n, a, &k.window.keys.onces, r)
	default:
		k.sliding.admit(key, n, a, &k.sliding.keys.onces, r)
	}
}

// Refund gives back what a, an Admission the limiter made for key, still
// holds, at most once (see Refunder): a bucket's tokens that have not
// refilled since, a window's events while their window lasts, a sliding
// log's entries still in it. After a Reset of the key it gives back
// nothing, and so it does for an Admission of another key.
func (k *Keyed[K]) Refund(key K, a Admission) {
	switch {
	case k.bucket != nil:
		k.bucket.refundKey(key, &a)
	case k.window != nil:
		k.window.refund(key, &a)
	default:
		k.sliding.refundKey(key, &a)
	}
}

// Reset forgets key: its next event meets a full quota. Admissions that race
// with Reset happen either wholly before it (and are forgotten) or after it.
func (k *Keyed[K]) Reset(key K) { k.of.resetKey(key) }

// Stats returns what the limiter has counted (see Stats and WithStats).
func (k *Keyed[K]) Stats() Stats { return k.of.stats() }

// Close stops the limiter's evictor. The limiter still answers after Close,
// exactly, but no longer forgets idle keys in the background. It returns
// nil; the error is there so that a limiter is an io.Closer, as a Redis
// limiter is.
func (k *Keyed[K]) Close() error {
	k.of.stop()
	return nil
}

// Wait blocks until one event for key may happen, records it and returns
// nil. Wait is shorthand for WaitN(ctx, key, 1).
func (k *Keyed[K]) Wait(ctx context.Context, key K) error { return k.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and records them. It fails
// at once, recording nothing, if n can never pass (ErrExceedsLimit) or if
// the wait would outlast ctx's deadline (ErrWouldExceedDeadline); it
// returns ctx's error, wrapped, if ctx ends first, having taken nothing.
//
// A TokenBucket serves its waiters first come, first served: each reserves
// its turn once and sleeps until it, and a waiter that gives up moves the
// ones behind it up. Waiters of a window are not queued: each sleeps until
// its RetryAfter and asks again, so the first to ask once there is room
// wins (a window cannot set aside a place in its future without counting
// it now).
func (k *Keyed[K]) WaitN(ctx context.Context, key K, n int) error {
	switch {
	case k.bucket != nil:
		return k.bucket.waitKey(ctx, key, n)
	case k.window != nil:
		return k.window.waitKey(ctx, key, n)
	}
	return k.sliding.waitKey(ctx, key, n)
}

// timers is the clock the limiter reads, for WaitN and All.
func (k *Keyed[K]) timers() clock.Clock { return k.of.timers() }
