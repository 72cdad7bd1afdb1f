package keylimit

// Limiter is what every keyed limiter in this module does: TokenBucket,
// FixedWindow, SlidingWindow, SlidingCounter, the Redis limiters of the redislimit module,
// and combinations of them made by All.
//
// Implementations are safe for concurrent use.
type Limiter[K comparable] interface {
	// Allow reports whether one event for key may happen now, and records it
	// if so. It is shorthand for AllowN(key, 1).
	Allow(key K) bool
	// AllowN reports whether n events for key may happen now, and records
	// all n if so; otherwise it records nothing.
	AllowN(key K, n int) bool
	// Take records n events for key if all n fit, else nothing, and reports
	// the decision and the key's state after it.
	Take(key K, n int) Result
	// Peek reports the key's state now, recording nothing. Its Allowed says
	// whether Allow(key) would pass.
	Peek(key K) Result
	// Reset forgets key: its next event meets a full quota.
	Reset(key K)
}

// Refunder is implemented by limiters that can give admitted events back.
// All uses it to undo the admissions of the limiters that admitted a request
// another one refused.
type Refunder[K comparable] interface {
	// Refund gives back n events that were admitted for key, as if they had
	// not been. Refunding events that were not admitted may restore capacity
	// early, but never beyond a full quota.
	Refund(key K, n int)
}

var (
	_ Limiter[string]  = (*TokenBucket[string])(nil)
	_ Refunder[string] = (*TokenBucket[string])(nil)
	_ Limiter[string]  = (*FixedWindow[string])(nil)
	_ Refunder[string] = (*FixedWindow[string])(nil)
	_ Limiter[string]  = (*SlidingWindow[string])(nil)
	_ Refunder[string] = (*SlidingWindow[string])(nil)
	_ Limiter[string]  = (*SlidingCounter[string])(nil)
	_ Refunder[string] = (*SlidingCounter[string])(nil)
)
