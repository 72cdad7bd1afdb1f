package keylimit

import (
	"context"
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
//
// SetLimit keeps a key's current count as a FixedWindow's does, and its
// previous count only if its window overlaps the new previous one, so the
// FixedWindow's bound holds however often the limit changes.
type SlidingCounter[K comparable] struct {
	Keyed[K]

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
	c.Keyed = Keyed[K]{of: &c.w, window: &c.w}
	if err := initWindowLimiter(&c.w, c, l, opts, true); err != nil {
		return nil, err
	}
	return c, nil
}

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (c *SlidingCounter[K]) Allow(key K) bool { return c.w.allow(key) }

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
func (c *SlidingCounter[K]) Take(key K, n int) Result { return c.w.Take(key, n) }

// admitPart is Admit for All, without the once (see partAdmitter).
func (c *SlidingCounter[K]) admitPart(_ context.Context, key K, n int) (r Result, a Admission, err error) {
	c.w.admit(key, n, &a, nil, &r)
	return // naked, as Admit's
}
