package keylimit

import "context"

// Limiter is what every keyed limiter in this module does: TokenBucket,
// FixedWindow, SlidingWindow, SlidingCounter, the Redis limiters of the
// redislimit module, and combinations of them made by All.
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

// ContextLimiter is a Limiter whose decisions can wait on something outside
// the process, such as the Redis limiters of the redislimit module, and so
// take a context: it admits, peeks and refunds under one. All, WaitN, quota
// and the httplimit middleware and Transport use these methods when a
// limiter has them (each is asked for on its own, so a limiter may have
// only some).
type ContextLimiter[K comparable] interface {
	Limiter[K]
	Refunder[K]
	// TakeContext is Take under ctx. A ctx that has ended when it is called
	// makes no decision: the Result is refused and the error is ctx's. A
	// non-nil error otherwise says why the decision is not the limit's own
	// (a failure policy answered while the store failed).
	TakeContext(ctx context.Context, key K, n int) (Result, error)
	// PeekContext is Peek under ctx.
	PeekContext(ctx context.Context, key K) (Result, error)
	// AdmitContext is Admit under ctx, as TakeContext is Take.
	AdmitContext(ctx context.Context, key K, n int) (Result, Admission, error)
	// RefundContext is Refund under ctx.
	RefundContext(ctx context.Context, key K, a Admission) error
}

// Admission is what one admitted request took from a limiter: how many
// events, and where the limiter counted them. Refund takes it to give back
// exactly what the admission still holds. The zero Admission, a refused
// request's, gives back nothing.
type Admission struct {
	// N is the number of events admitted.
	N int
	// Mark is where the limiter counted them, in its own terms (the TAT a
	// bucket's admission wrote, the window a window counted in, the time a
	// sliding log recorded). Only the limiter that made it reads it.
	Mark int64
	// By is the limiter that made it. Refund ignores an Admission another
	// limiter made; a limiter that wraps others (All, a Redis limiter with
	// its in-process fallback) tells by it whose Admission it holds.
	By any
	// What the in-memory limiters check on Refund: the key's state the
	// events were counted in, the key (its hash, in the limiter's seed),
	// the limiter's count of Resets before the admission, and the unit Mark
	// counts in (a bucket's interval, a window's period).
	state any
	key   uint64
	epoch uint64
	unit  int64
}

// Refunder is implemented by limiters whose admissions can be given back
// exactly. All uses it to undo what the limiters before a refusing one
// took; every limiter of this module and of redislimit implements it.
type Refunder[K comparable] interface {
	// Admit is Take, and also returns what an admission took, for Refund.
	// A refused request's Admission is the zero Admission.
	Admit(key K, n int) (Result, Admission)
	// Refund gives back what a, an Admission this limiter made for key,
	// still holds, and never more: events whose window has ended, whose log
	// entries have left the window, or whose tokens have refilled since are
	// not given back, so that however late the refund, no interval ever
	// admits more than the limit. A Refund after a change of limit that
	// moved the key may give back nothing, and so does one with an
	// Admission made for another key (this module's limiters and
	// redislimit's check it). Refund each Admission at most once: an
	// in-memory limiter cannot tell a second Refund of it from the first,
	// and gives back again what the key's later admissions hold (at most
	// the quota), as if the events of a request that did happen had not; a
	// Redis limiter gives nothing for a second Refund.
	//
	// A copy of a whose N is lowered to k gives back at most k of its
	// events, by the same rule: a partial refund, of what an outcome did
	// not charge (quota's Policy.Charge). Lowering N is the one change a
	// caller may make to an Admission; raising it is a misuse, as a second
	// Refund is (a Redis limiter ignores it).
	Refund(key K, a Admission)
}

var (
	_ Refunder[string] = (*TokenBucket[string])(nil)
	_ Refunder[string] = (*FixedWindow[string])(nil)
	_ Refunder[string] = (*SlidingWindow[string])(nil)
	_ Refunder[string] = (*SlidingCounter[string])(nil)
)
