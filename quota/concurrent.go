package quota

import (
	"context"
	"fmt"

	"github.com/keylimit/keylimit"
)

// Concurrent returns a concurrency Policy named name: each key may have n
// requests in flight at once, counted in a new keylimit.Concurrency built
// with opts (keylimit.WithMaxHold, keylimit.WithMaxKeys, ...). If n or an
// option is invalid, New reports the error. Set Policy.Concurrency to a
// limiter of your own to keep a handle on it, or to share it.
//
// A request of its tier takes cost slots (1 unless the adapter's Cost says
// otherwise) with TryAcquire when it is decided, and holds them until the
// adapter calls Verdict.Finish, when the handler has returned, however it
// ended. A request that finds no free slot is refused, its Retry-After the
// limiter's estimate of when one will be (a Concurrency's: from its keys'
// recent hold times). With rate policies in the same tier it is all or
// nothing: a request refused by a rate policy holds no slot, and one
// refused for want of a slot takes nothing from the rate policies.
//
// Its member of RateLimit-Policy has q, the slots, and
// qu="concurrent-requests", and no w: the quota is not over a time. Its
// member of RateLimit has r, the slots still free after the request, and
// no t: when a slot is freed is when a request in flight ends, which the
// server does not know (t is optional in the draft, and a guess would be
// read as a promise). Retry-After carries the estimate on a refusal only.
func Concurrent(name string, n int, opts ...keylimit.Option) Policy {
	c, err := keylimit.NewConcurrency[string](n, opts...)
	if err != nil {
		return Policy{Name: name, err: fmt.Errorf("policy %q: %w", name, err)}
	}
	return Policy{Name: name, Concurrency: c}
}

// takeHeld decides a request of a tier with a concurrency policy (t.held
// is its index): the slots first, then the rate policies, each policy's
// Result written into each, in the tier's order. The slots come first
// because giving them back (Permit.Release) is exact at any time and costs
// no call outside the process, while a rate admission given back costs a
// Refund (a Redis round trip for a Redis limiter). So a request refused for
// want of a slot asks the rate limiters nothing but their Peek, and one a
// rate policy refuses releases its slots before Decide returns: it held
// them only while it was decided, a request of the same key refused for
// want of a slot in that moment the only trace.
func (t *tier) takeHeld(ctx context.Context, key string, cost int, each []keylimit.Result) (keylimit.Result, keylimit.Permit, error) {
	held := t.policies[t.held]
	permit, res := held.held.TryAcquire(key, cost)
	each[t.held] = res
	rate := each[len(t.policies):] // the rate policies' Results, in order, then spread
	if !res.Allowed {
		for i, p := range t.policies {
			if i != t.held {
				each[i] = p.limiter.Peek(key)
			}
		}
		return res, keylimit.Permit{}, nil
	}
	var r keylimit.Result
	var err error
	switch {
	case t.decider == nil: // no rate policy
		return res, permit, nil
	case t.each != nil:
		r, err = t.each.TakeEach(ctx, key, cost, rate)
	case t.withCtx != nil:
		r, err = t.withCtx.TakeContext(ctx, key, cost)
		rate[0] = r
	default:
		r = t.decider.Take(key, cost)
		rate[0] = r
	}
	for i, j := 0, 0; i < len(t.policies); i++ {
		if i != t.held {
			each[i] = rate[j]
			j++
		}
	}
	if !r.Allowed || err != nil && ctx.Err() != nil {
		permit.Release()
		each[t.held] = held.held.Peek(key)
		return r, keylimit.Permit{}, err
	}
	return r.And(res), permit, err
}
