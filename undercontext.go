package keylimit

import "context"

// Asking a limiter under a context: the limiters that take one (the
// redislimit ones, see ContextLimiter) are asked under
// it, any other limiter as it is. All and WaitN ask through these, and only
// these.

// contextRefunder is a Refunder whose admissions and refunds take a context
// (the part of ContextLimiter that All and quota ask for on its own).
type contextRefunder[K comparable] interface {
	Refunder[K]
	AdmitContext(ctx context.Context, key K, n int) (Result, Admission, error)
	RefundContext(ctx context.Context, key K, a Admission) error
}

// taker is the least a limiter must have to be asked for events.
type taker[K comparable] interface {
	Take(key K, n int) Result
}

// takeContext is l.Take, under ctx if l has TakeContext.
func takeContext[K comparable](ctx context.Context, l taker[K], key K, n int) (Result, error) {
	if c, ok := l.(interface {
		TakeContext(ctx context.Context, key K, n int) (Result, error)
	}); ok {
		return c.TakeContext(ctx, key, n)
	}
	return l.Take(key, n), nil
}

// admitContext is r.Admit, under ctx if r has AdmitContext and RefundContext.
func admitContext[K comparable](ctx context.Context, r Refunder[K], key K, n int) (Result, Admission, error) {
	if c, ok := r.(contextRefunder[K]); ok {
		return c.AdmitContext(ctx, key, n)
	}
	res, adm := r.Admit(key, n)
	return res, adm, nil
}

// refundContext is r.Refund, under ctx if r has AdmitContext and RefundContext.
func refundContext[K comparable](ctx context.Context, r Refunder[K], key K, adm Admission) {
	if c, ok := r.(contextRefunder[K]); ok {
		c.RefundContext(ctx, key, adm)
		return
	}
	r.Refund(key, adm)
}

// peekContext is l.Peek, under ctx if l has PeekContext (its error is the
// Result's business: a Peek only informs a refusal).
func peekContext[K comparable](ctx context.Context, l Limiter[K], key K) Result {
	if c, ok := l.(interface {
		PeekContext(ctx context.Context, key K) (Result, error)
	}); ok {
		r, _ := c.PeekContext(ctx, key)
		return r
	}
	return l.Peek(key)
}
