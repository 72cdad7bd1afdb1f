package quota

import (
	"context"

	"github.com/keylimit/keylimit"
)

// takeApart decides a request of a tier that cannot be decided in one
// take: one with a concurrency policy (t.held) or policies charged by
// outcome (t.charged). It asks in this order, and stops at a refusal,
// giving back what the steps before took: the slots (TryAcquire), then
// the charged policies one by one (Admit, for the Admission that Finish
// refunds from), then the other rate policies (t.plain) in one take. The
// slots come first because giving them back (Permit.Release) is exact at
// any time and costs no call outside the process; the plain policies last
// because their take returns no Admission to give back by. A refused
// request asks the policies after the one that refused only their Peek.
// Each policy's Result is written into each, in the tier's order; a
// request that proceeds returns its Permit and, with charged policies, its
// charges.
func (t *tier) takeApart(ctx context.Context, key string, cost int, each []keylimit.Result) (keylimit.Result, keylimit.Permit, *charges, error) {
	var permit keylimit.Permit
	var sum keylimit.Result
	asked := false // sum holds a step's Result
	and := func(r keylimit.Result) {
		if asked {
			sum = sum.And(r)
		} else {
			sum, asked = r, true
		}
	}
	if t.held >= 0 {
		var r keylimit.Result
		permit, r = t.policies[t.held].held.TryAcquire(key, cost)
		each[t.held] = r
		if !r.Allowed {
			t.peekOthers(key, each, t.held, false)
			return r, keylimit.Permit{}, nil, nil
		}
		and(r)
	}
	var c *charges
	var firstErr error
	if len(t.charged) > 0 {
		c = &charges{tier: t, key: key, adms: make([]keylimit.Admission, len(t.charged))}
		c.reported.Store(-1)
		r, refuser, err := t.admitCharged(ctx, key, cost, each, c.adms)
		firstErr = err
		if refuser >= 0 {
			permit.Release()
			t.peekOthers(key, each, refuser, false)
			return r, keylimit.Permit{}, nil, err
		}
		and(r)
	}
	if len(t.plain) > 0 {
		rate := each[len(t.policies):] // the plain policies' Results, then spread
		var r keylimit.Result
		var err error
		switch {
		case t.each != nil:
			r, err = t.each.TakeEach(ctx, key, cost, rate)
		case t.withCtx != nil:
			r, err = t.withCtx.TakeContext(ctx, key, cost)
			rate[0] = r
		default:
			r = t.decider.Take(key, cost)
			rate[0] = r
		}
		for j, at := range t.plain {
			each[at] = rate[j]
		}
		if firstErr == nil {
			firstErr = err
		}
		if !r.Allowed || err != nil && ctx.Err() != nil {
			permit.Release()
			if c != nil {
				t.undoCharged(key, c.adms)
			}
			t.peekOthers(key, each, -1, true)
			return r, keylimit.Permit{}, nil, firstErr
		}
		and(r)
	}
	return sum, permit, c, firstErr
}

// peekOthers writes into each the Peek of every policy of t after a
// refusal, once what the request took is given back: all but refuser (the
// policy whose refusal each holds) and, if plain, but the plain policies,
// whose take reported them so.
func (t *tier) peekOthers(key string, each []keylimit.Result, refuser int, plain bool) {
	for i, p := range t.policies {
		switch {
		case i == refuser:
		case p.held != nil:
			each[i] = p.held.Peek(key)
		case plain && p.charge == nil:
		default:
			each[i] = p.limiter.Peek(key)
		}
	}
}
