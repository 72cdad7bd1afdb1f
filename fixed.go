package keylimit

import (
	"context"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/compose"
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
//
// SetLimit keeps the count of a key's current window, even above the new
// Events (it is then refused until the window ends). With one Period, a key
// so admits at most the larger Events in any aligned window, however often
// the limit changes; a change of Period moves the key to the new window
// that holds now, with its count, and the bound is looser (DESIGN.md,
// "Changing a limit").
type FixedWindow[K comparable] struct {
	Keyed[K]

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
	f.Keyed = Keyed[K]{of: &f.w, window: &f.w}
	if err := initWindowLimiter(&f.w, f, l, opts, false); err != nil {
		return nil, err
	}
	return f, nil
}

// quota reads a calendar period's bounds (LimitOf(key).WindowAt) at the
// window's time.
func init() {
	compose.RegisterClock(func(l any) (clock.Clock, bool) {
		f, ok := l.(*FixedWindow[string])
		if !ok {
			return nil, false
		}
		return f.w.keys.clock.injected, true
	})
}

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (f *FixedWindow[K]) Allow(key K) bool { return f.w.allow(key) }

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
func (f *FixedWindow[K]) Take(key K, n int) Result { return f.w.Take(key, n) }

// admitPart is Admit for All, without the once (see partAdmitter).
func (f *FixedWindow[K]) admitPart(_ context.Context, key K, n int) (r Result, a Admission, err error) {
	f.w.admit(key, n, &a, nil, &r)
	return // naked, as Admit's
}
