package quota

import (
	"cmp"
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
// charges; a refused one, held: bit i says policy i (of the first 64), a
// charged one, lacks only what requests in flight hold (heldOnly).
func (t *tier) takeApart(ctx context.Context, key string, cost int, each []keylimit.Result) (_ keylimit.Result, _ keylimit.Permit, _ *charges, held uint64, _ error) {
	var s apartSum
	if t.held >= 0 {
		permit, r := t.policies[t.held].tryAcquire(ctx, key, cost)
		each[t.held] = r
		if !r.Allowed {
			return r, keylimit.Permit{}, nil, t.peekOthers(key, cost, each, t.held, false), nil
		}
		s.permit = permit
		s.and(r, nil)
	}
	if len(t.charged) > 0 {
		c := &charges{tier: t, key: key, cost: cost, adms: make([]keylimit.Admission, len(t.charged))}
		c.reported.Store(-1)
		r, refuser, only, err := t.admitCharged(ctx, key, cost, each, c.adms)
		if refuser >= 0 {
			s.permit.Release()
			held = t.peekOthers(key, cost, each, refuser, false)
			if only && refuser < 64 {
				held |= 1 << refuser
			}
			return r, keylimit.Permit{}, nil, held, err
		}
		s.charges = c
		s.and(r, err)
	}
	if len(t.plain) > 0 {
		r, err := t.takePlain(ctx, key, cost, each)
		if !r.Allowed || err != nil && ctx.Err() != nil {
			s.permit.Release()
			if s.charges != nil {
				t.undoCharged(key, cost, s.charges.adms)
			}
			return r, keylimit.Permit{}, nil, t.peekOthers(key, cost, each, -1, true), cmp.Or(s.err, err)
		}
		s.and(r, err)
	}
	return s.sum, s.permit, s.charges, 0, s.err
}

// tryAcquire takes cost slots of key from p, a concurrency policy, under
// ctx if its limiter decides by it.
func (p *policy) tryAcquire(ctx context.Context, key string, cost int) (keylimit.Permit, keylimit.Result) {
	if p.tryCtx != nil {
		return p.tryCtx(ctx, key, cost)
	}
	return p.held.TryAcquire(key, cost)
}

// apartSum is what the steps of takeApart have taken so far.
type apartSum struct {
	sum     keylimit.Result // the steps' Results, combined (Result.And)
	asked   bool            // sum holds a step's Result
	permit  keylimit.Permit
	charges *charges
	err     error // the first step's error
}

// and adds a step that admitted, with r and err.
func (s *apartSum) and(r keylimit.Result, err error) {
	if s.asked {
		s.sum = s.sum.And(r)
	} else {
		s.sum, s.asked = r, true
	}
	s.err = cmp.Or(s.err, err)
}

// takePlain takes cost of key from the tier's plain policies in one take,
// and writes each one's Result into each at its index.
func (t *tier) takePlain(ctx context.Context, key string, cost int, each []keylimit.Result) (r keylimit.Result, err error) {
	rate := each[len(t.policies):] // the plain policies' Results, then spread
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
	return r, err
}

// peekOthers writes into each the Peek of every policy of t after a
// refusal, once what the request took is given back: all but refuser (the
// policy whose refusal each holds) and, if plain, but the plain policies,
// whose take reported them so. A remote policy is not asked (its Peek
// would be a round trip for a request already refused): its Result is the
// zero Result, which render leaves out of the fields. It returns held, the
// policies charged by outcome that lack cost only for what requests in
// flight hold (heldOnly).
func (t *tier) peekOthers(key string, cost int, each []keylimit.Result, refuser int, plain bool) (held uint64) {
	for i, p := range t.policies {
		switch {
		case i == refuser, plain && p.held == nil && p.charge == nil:
		case p.remote:
			each[i] = keylimit.Result{}
		case p.held != nil:
			each[i] = p.held.Peek(key)
		default:
			each[i] = p.limiter.Peek(key)
			if p.charge != nil && heldOnly(&each[i], cost, p.holds.count(key)) && i < 64 {
				held |= 1 << i
			}
		}
	}
	return held
}
