package keylimit

import (
	"context"

	"github.com/benbjohnson/clock"
)

// SlidingCounter limits each key to about Limit.Events in any interval of
// length Limit.Period, in 16 bytes per key whatever the quota. Limit.Burst is
// ignored.
//
// It counts events in windows aligned to the Unix epoch, like a FixedWindow,
// and estimates the sliding window that ends now from the last two: the
// previous window's count, weighted by the share of it still inside the
// sliding window, plus the current count; n events pass if the estimate plus
// n is at most Events. It errs both ways when the previous window's events
// were not spread evenly: up to 2 × Events can pass in one interval of
// Period (never more than Events in one aligned window), and a burst after a
// quiet stretch can be refused early. Use a SlidingWindow when the quota must
// hold exactly; DESIGN.md measures the estimate against it.
//
// Counts and window share one word, updated by one compare-and-swap, which
// bounds Events by Period: 65,535 a second, 16,777,215 a day.
type SlidingCounter[K comparable] struct {
	w windowLimiter[K]
}

// NewSlidingCounter returns a SlidingCounter that admits about l.Events per
// key in any interval of length l.Period. It returns an error if l or an
// option is invalid, or if l.Events is too large for the key's one word
// (see SlidingCounter).
//
// The limiter forgets a key once its estimate is back to zero, at most two
// Periods after its last admission (see WithEvictionInterval and
// WithMaxKeys). Call Close when done with it to stop its evictor at once; a
// limiter dropped without Close stops it once the garbage collector finds it
// unreachable.
func NewSlidingCounter[K comparable](l Limit, opts ...Option) (*SlidingCounter[K], error) {
	c := new(SlidingCounter[K])
	if err := initWindowLimiter(&c.w, c, l, opts, true); err != nil {
		return nil, err
	}
	return c, nil
}

// Limit returns the counter's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by SetKeyLimit are not under it.
func (c *SlidingCounter[K]) Limit() Limit { return c.w.policy.limit() }

// LimitOf returns the limit key is under now: its own, from SetKeyLimit,
// or the counter's. It creates no key.
func (c *SlidingCounter[K]) LimitOf(key K) Limit { return c.w.policy.resolve(key).limit }

// SetLimit makes l the counter's limit, and has every key resolve its limit
// again (SetKeyLimit's function is asked anew), each from its next call.
// It returns an error, and changes nothing, if l is invalid.
//
// A key keeps its counts: with the same Period its estimate is the same
// number, weighed against the new Events; a new Period moves the key to the
// new window that holds now, with its current count, and its previous count
// if that window overlaps the new previous one. A key whose estimate has
// faded to nothing starts afresh. So a change never creates capacity; the
// bound it keeps is FixedWindow.SetLimit's (see DESIGN.md).
func (c *SlidingCounter[K]) SetLimit(l Limit) error { return c.w.policy.set(l) }

// SetKeyLimit gives each key its own limit: f(key), asked when a key is
// next seen (and again after SetLimit). A zero Limit{} from f means the
// counter's own limit; a nil f puts every key under it again. One limiter
// can so serve several tiers: a paying client twice the quota of a free
// one. Call it right after the constructor, before the counter serves, for
// the tiers to hold from the first request; called later, every key moves
// to its new limit on its next call and keeps what it used, as with
// SetLimit. f is called from many goroutines at once and must not call
// the counter. If f returns an invalid Limit, that key's requests are
// refused and their Result.Err says why.
func (c *SlidingCounter[K]) SetKeyLimit(f func(key K) Limit) error { return c.w.policy.setKeyLimit(f) }

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (c *SlidingCounter[K]) Allow(key K) bool { return c.w.allowN(key, 1) }

// AllowN reports whether n events for key may happen now, and counts all n if
// so; otherwise it counts nothing. AllowN is Take(key, n).Allowed without the
// work of filling in the rest of the Result.
func (c *SlidingCounter[K]) AllowN(key K, n int) bool { return c.w.allowN(key, n) }

// Take counts n events for key if the estimate has room for all n, and
// reports the decision and the estimate after it. A refused call changes
// nothing.
//
// n == 0 is always allowed and counts nothing. n < 0, or n above Events, can
// never pass: the Result is refused with RetryAfter InfDuration.
func (c *SlidingCounter[K]) Take(key K, n int) Result { return c.w.admit(key, n, nil, nil) }

// Admit is Take, and also returns what an admission took, for Refund. An
// admission allocates 16 bytes, the once its Admission's copies share.
func (c *SlidingCounter[K]) Admit(key K, n int) (Result, Admission) {
	var a Admission
	r := c.w.admit(key, n, &a, c)
	return r, a.handOut()
}

// admitPart is Admit for All, without the once (see partAdmitter).
func (c *SlidingCounter[K]) admitPart(_ context.Context, key K, n int) (Result, Admission, error) {
	var a Admission
	r := c.w.admit(key, n, &a, c)
	return r, a, nil
}

// Peek reports the key's estimate now without counting anything: Allowed
// tells whether Allow(key) would pass, RetryAfter how long until it would.
// Peek does not create the key.
func (c *SlidingCounter[K]) Peek(key K) Result { return c.w.peek(key) }

// Reset forgets key: its counts are zero again. Admissions that race with
// Reset happen either wholly before it (and are forgotten) or after it.
func (c *SlidingCounter[K]) Reset(key K) { c.w.reset(key) }

// Refund gives back the events of a, an Admission the counter made for key,
// from the count of the window they were admitted in, while that count
// still weighs: as the current count, or as the previous count in the
// window after (see Refunder). An Admission of another key gives back
// nothing.
func (c *SlidingCounter[K]) Refund(key K, a Admission) { c.w.refund(key, a, c) }

// Stats returns what the counter has counted (see Stats and WithStats).
func (c *SlidingCounter[K]) Stats() Stats { return c.w.keys.stats() }

// Len returns the number of keys the counter tracks.
func (c *SlidingCounter[K]) Len() int { return c.w.keys.len() }

// Clock returns the clock the counter reads: WithClock's, or the system
// clock.
func (c *SlidingCounter[K]) Clock() clock.Clock { return c.w.keys.clock.timers }

// Close stops the counter's evictor. The counter still answers after Close,
// exactly, but no longer forgets idle keys in the background. It returns nil.
//
// The error is there so that a limiter is an io.Closer, closed as
// anything else a program opens is (a defer, a list of io.Closers); a
// Redis limiter's Close has the same signature.
func (c *SlidingCounter[K]) Close() error {
	c.w.evictor.close()
	return nil
}

// Wait blocks until one event for key may happen, counts it and returns nil.
// Wait is shorthand for WaitN(ctx, key, 1).
func (c *SlidingCounter[K]) Wait(ctx context.Context, key K) error { return c.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and counts them. It fails
// at once, counting nothing, if n can never pass (ErrExceedsLimit) or if the
// wait would outlast ctx's deadline; it returns ctx's error, wrapped, if ctx
// ends first. A failed wait counts nothing. Waiters are not queued: each
// sleeps until its RetryAfter and asks again, so the first to ask once
// there is room wins. A window cannot set aside a place in a window that
// has not begun without counting it now; TokenBucket's WaitN can, and
// serves waiters first come, first served.
func (c *SlidingCounter[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, c, c.w.keys.clock.timers, key, n)
}
