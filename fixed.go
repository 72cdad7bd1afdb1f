package keylimit

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"
)

// FixedWindow limits each key to Limit.Events per window of Limit.Period.
// Windows are aligned to multiples of Period since the Unix epoch (a minute
// window runs from :00 to :00), so every instance, and the Redis backend,
// agrees on where a window starts. Limit.Burst is ignored.
//
// A key's state is one word, its window and count, updated by one
// compare-and-swap; a key costs 16 bytes of state. At a boundary a client can
// pass up to 2 × Events within moments (Events at the end of one window and
// Events at the start of the next); a FixedWindow never admits more than
// Events within one aligned window. Use a SlidingWindow (exact) or a
// SlidingCounter (an estimate in one word) when the boundary matters.
//
// RetryAfter and ResetAfter run to the window's end. If an injected clock
// steps back into an earlier window than the key's, the key still decides
// in its own window: a step back never reopens capacity.
type FixedWindow[K comparable] struct {
	w windowLimiter[K]
}

// NewFixedWindow returns a FixedWindow that admits l.Events per key in each
// window of l.Period. It returns an error if l or an option is invalid, or if
// l.Events does not fit the count beside the window's index in the key's
// word: the most is 2^32 − 1 events in a window of a second, 3 in a window
// of a nanosecond, more the longer the window.
//
// The limiter forgets a key once its window has ended (see
// WithEvictionInterval and WithMaxKeys). Call Close when done with it to stop
// its evictor at once; a limiter dropped without Close stops it once the
// garbage collector finds it unreachable.
func NewFixedWindow[K comparable](l Limit, opts ...Option) (*FixedWindow[K], error) {
	f := new(FixedWindow[K])
	if err := initWindowLimiter(&f.w, f, l, opts, false); err != nil {
		return nil, err
	}
	return f, nil
}

// Limit returns the window's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by SetKeyLimit are not under it.
func (f *FixedWindow[K]) Limit() Limit { return f.w.policy.limit() }

// LimitOf returns the limit key is under now: its own, from SetKeyLimit,
// or the window's. It creates no key.
func (f *FixedWindow[K]) LimitOf(key K) Limit { return f.w.policy.resolve(key).limit }

// SetLimit makes l the window's limit, and has every key resolve its limit
// again (SetKeyLimit's function is asked anew), each from its next call.
// It returns an error, and changes nothing, if l is invalid.
//
// A key keeps the count of its current window, even above the new Events
// (it is then refused until the window ends); a key whose window has ended
// starts afresh. With one Period, a key so admits at most the larger Events
// in any aligned window, however often the limit changes. A change of
// Period moves the key to the new window that holds now, with its count;
// the bound is then looser (see DESIGN.md, "Changing a limit").
func (f *FixedWindow[K]) SetLimit(l Limit) error { return f.w.policy.set(l) }

// SetKeyLimit gives each key its own limit: fn(key), asked when a key is
// next seen (and again after SetLimit). A zero Limit{} from fn means the
// window's own limit; a nil fn puts every key under it again. One limiter
// can so serve several tiers: a paying client twice the quota of a free
// one. Call it right after the constructor, before the window serves, for
// the tiers to hold from the first request; called later, every key moves
// to its new limit on its next call and keeps what it used, as with
// SetLimit. fn is called from many goroutines at once and must not call
// the window. If fn returns an invalid Limit, that key's requests are
// refused and their Result.Err says why.
func (f *FixedWindow[K]) SetKeyLimit(fn func(key K) Limit) error { return f.w.policy.setKeyLimit(fn) }

// WindowOf returns the window a decision for key would count in now, on
// the window's clock and under the key's limit: for a Calendar limit, the
// period of the calendar in its zone (a day of 23 or 25 hours when the zone
// changes its clock). It creates no key.
func (f *FixedWindow[K]) WindowOf(key K) (start, end time.Time) { return f.w.windowOf(key) }

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (f *FixedWindow[K]) Allow(key K) bool { return f.w.allowN(key, 1) }

// AllowN reports whether n events for key may happen now, and counts all n if
// so; otherwise it counts nothing. AllowN is Take(key, n).Allowed without the
// work of filling in the rest of the Result.
func (f *FixedWindow[K]) AllowN(key K, n int) bool { return f.w.allowN(key, n) }

// Take counts n events for key in the current window if all n fit, and
// reports the decision and the window after it. A refused call changes
// nothing.
//
// n == 0 is always allowed and counts nothing. n < 0, or n above Events, can
// never pass: the Result is refused with RetryAfter InfDuration.
func (f *FixedWindow[K]) Take(key K, n int) Result { return f.w.admit(key, n, nil, nil) }

// Admit is Take, and also returns what an admission took, for Refund. An
// admission allocates 16 bytes, the once its Admission's copies share.
func (f *FixedWindow[K]) Admit(key K, n int) (Result, Admission) {
	var a Admission
	r := f.w.admit(key, n, &a, f)
	return r, a.handOut()
}

// admitPart is Admit for All, without the once (see partAdmitter).
func (f *FixedWindow[K]) admitPart(_ context.Context, key K, n int) (Result, Admission, error) {
	var a Admission
	r := f.w.admit(key, n, &a, f)
	return r, a, nil
}

// Peek reports the state of key's window now without counting anything:
// Allowed tells whether Allow(key) would pass, RetryAfter how long until it
// would. Peek does not create the key.
func (f *FixedWindow[K]) Peek(key K) Result { return f.w.peek(key) }

// Reset forgets key: its window is empty again. Admissions that race with
// Reset happen either wholly before it (and are forgotten) or after it.
func (f *FixedWindow[K]) Reset(key K) { f.w.reset(key) }

// Refund gives back the events of a, an Admission the window made for key,
// if their window has not ended: it lowers that window's count. Events of a
// window that has ended are gone already, and are not given back to a later
// one (see Refunder). An Admission of another key gives back nothing.
func (f *FixedWindow[K]) Refund(key K, a Admission) { f.w.refund(key, a, f) }

// Stats returns what the window has counted (see Stats and WithStats).
func (f *FixedWindow[K]) Stats() Stats { return f.w.keys.stats() }

// Len returns the number of keys the window tracks.
func (f *FixedWindow[K]) Len() int { return f.w.keys.len() }

// Clock returns the clock the window reads: WithClock's, or the system
// clock.
func (f *FixedWindow[K]) Clock() clock.Clock { return f.w.keys.clock.timers }

// Close stops the window's evictor. The window still answers after Close,
// exactly, but no longer forgets idle keys in the background. It returns nil.
//
// The error is there so that a limiter is an io.Closer, closed as
// anything else a program opens is (a defer, a list of io.Closers); a
// Redis limiter's Close has the same signature.
func (f *FixedWindow[K]) Close() error {
	f.w.evictor.close()
	return nil
}

// Wait blocks until one event for key may happen, counts it and returns nil.
// Wait is shorthand for WaitN(ctx, key, 1).
func (f *FixedWindow[K]) Wait(ctx context.Context, key K) error { return f.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and counts them. It fails
// at once, counting nothing, if n can never pass (ErrExceedsLimit) or if the
// wait would outlast ctx's deadline; it returns ctx's error, wrapped, if ctx
// ends first. A failed wait counts nothing. Waiters are not queued: each
// sleeps until its RetryAfter and asks again, so the first to ask once
// there is room wins. A window cannot set aside a place in a window that
// has not begun without counting it now; TokenBucket's WaitN can, and
// serves waiters first come, first served.
func (f *FixedWindow[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, f, f.w.keys.clock.timers, key, n)
}
