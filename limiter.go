package keylimit

import (
	"context"
	"sync/atomic"
)

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
// exactly what the admission still holds, once: copies of an Admission are
// the same admission. The zero Admission, a refused request's, gives back
// nothing.
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
	// once is what the copies of an admitted Admission share, so that only
	// the first Refund of any of them gives back. Admit allocates it, once
	// per admission, only when it admits; nil in the Admissions this package
	// makes for its own use (see partAdmitter) and never hands out.
	once *refundOnce
}

// refundOnce is the once of one in-memory admission's Refunds: done is set
// by the first, and n is what the admission took, above which no copy
// gives back (a raised N is ignored, as on Redis). An atomic.Bool and an
// int, so Admit's one allocation is 16 bytes.
type refundOnce struct {
	done atomic.Bool
	n    int
}

// handOut returns a, an Admission an in-memory limiter just made, as Admit
// hands it to its caller: with the once-state its copies share, if it
// took anything. This is Admit's one allocation; Allow and Take make none.
func (a Admission) handOut() Admission {
	if a.N > 0 {
		a.once = &refundOnce{n: a.N}
	}
	return a
}

// claim is the once of a Refund of a, which the caller has found to be its
// own and of its key: it reports false if a Refund of a or of a copy of it
// came first, and otherwise returns a with N at most what the admission
// took. An Admission without the once-state is one this package made for
// its own use, which its maker refunds at most once.
func (a Admission) claim() (Admission, bool) {
	o := a.once
	if o == nil {
		return a, true
	}
	if !o.done.CompareAndSwap(false, true) {
		return a, false
	}
	a.N = min(a.N, o.n)
	return a, true
}

// partAdmitter is implemented by this package's limiters that make
// Admissions: admitPart is AdmitContext without the once-state (see
// Admission.once), so that it allocates nothing. It is for All, which
// asks for the admission of each limiter but the last on every request,
// refunds each at most once itself, and never hands one out.
type partAdmitter[K comparable] interface {
	admitPart(ctx context.Context, key K, n int) (Result, Admission, error)
}

// partOf returns l as a partAdmitter if it is one of this package's
// limiters itself, else nil. A type that embeds one has the method too, but
// its own Admit (one that counts or logs, say) is the one to ask.
func partOf[K comparable](l any) partAdmitter[K] {
	switch l := l.(type) {
	case *TokenBucket[K]:
		return l
	case *FixedWindow[K]:
		return l
	case *SlidingWindow[K]:
		return l
	case *SlidingCounter[K]:
		return l
	case *Penalty[K]:
		return l
	}
	return nil
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
	// redislimit's check it). An Admission is refunded once: a second
	// Refund of it, or of any copy of it, gives back nothing, in memory as
	// on Redis.
	//
	// A copy of a whose N is lowered to k gives back at most k of its
	// events, by the same rule: a partial refund, of what an outcome did
	// not charge (quota's Policy.Charge); it is the admission's one Refund.
	// Lowering N is the one change a caller may make to an Admission; a
	// raised N is ignored: no Refund gives back more than was admitted.
	Refund(key K, a Admission)
}

var (
	_ Refunder[string] = (*TokenBucket[string])(nil)
	_ Refunder[string] = (*FixedWindow[string])(nil)
	_ Refunder[string] = (*SlidingWindow[string])(nil)
	_ Refunder[string] = (*SlidingCounter[string])(nil)
)
