package quota

import (
	"context"
	"slices"

	"github.com/keylimit/keylimit"
)

// step is one step of takeApart: its kind, and for stepCharged the
// policies t.charged[from:to].
type step struct {
	kind     stepKind
	from, to int
}

type stepKind uint8

const (
	stepHeld    stepKind = iota // the concurrency policy's slots (TryAcquire)
	stepCharged                 // policies charged by outcome, one by one (Admit)
	stepLocal                   // the plain policies of t.local, one by one in process (Admit)
	stepPlain                   // the plain policies of t.plain, in one take
)

// plan orders the steps of takeApart: the policies in process first (the
// concurrency policy, the charged ones, the plain ones), then the others
// (their Stats say Remote, or they have none) in the same order, the
// plain ones in one take, last. A request one of them refuses in process
// so makes no round trip, in whatever order the policies were given;
// what the steps in process took is given back in process if a remote one
// refuses, exactly, at any time (a Release; a Refund gives back what is
// still held). Within each step, the policies are in the order given.
//
// The plain policies taken with the remote ones in one take (keylimit.All
// asks its limiters in process first) are split only if a remote
// concurrency or charged policy comes before that take: those in process
// that can Refund (t.local) are then admitted before it, one by one, for
// an Admission to give back by.
func (t *tier) plan() {
	in := func(i int) bool { return t.policies[i].inProcess }
	// Those in process first: then what takeApart has admitted of them is
	// a prefix of t.charged.
	var near, far []int
	for _, i := range t.charged {
		if in(i) {
			near = append(near, i)
		} else {
			far = append(far, i)
		}
	}
	t.charged = append(near, far...)
	local := len(near) // the charged policies in process
	heldIn := t.held >= 0 && in(t.held)
	if t.held >= 0 && !heldIn || local < len(t.charged) {
		rest := t.plain[:0]
		for _, i := range t.plain {
			if in(i) && t.policies[i].refunder != nil {
				t.local = append(t.local, i)
			} else {
				rest = append(rest, i)
			}
		}
		t.plain = rest
	}
	add := func(ok bool, s step) {
		if ok {
			t.steps = append(t.steps, s)
		}
	}
	add(heldIn, step{kind: stepHeld})
	add(local > 0, step{kind: stepCharged, from: 0, to: local})
	add(len(t.local) > 0, step{kind: stepLocal})
	add(t.held >= 0 && !heldIn, step{kind: stepHeld})
	add(local < len(t.charged), step{kind: stepCharged, from: local, to: len(t.charged)})
	add(len(t.plain) > 0, step{kind: stepPlain})
}

// takeApart decides a request of a tier that cannot be decided in one
// take: one with a concurrency policy (t.held) or policies charged by
// outcome (t.charged). It asks the policies in the order of t.steps (see
// plan), and stops at a refusal, giving back what the steps before took.
// The slots come before the rate policies in each place
// because giving them back (Permit.Release) is exact at any time; the
// plain policies of the last take come last because their take returns no
// Admission to give back by. A refused request asks the policies it did
// not take from only their Peek (see peekOthers). Each policy's Result is
// written into each, in the tier's order; a request that proceeds returns
// its Permit and, with charged policies, its charges; a refused one, held:
// bit i says policy i (of the first 64), a charged one, lacks only what
// requests in flight hold (heldOnly). ended says that ctx ended while a
// limiter failed (a failure policy answered): the request does not
// proceed, and takeApart has given back what it took.
func (t *tier) takeApart(ctx context.Context, key string, cost int, each []keylimit.Result) (_ keylimit.Result, _ keylimit.Permit, _ *charges, held uint64, ended bool) {
	a := apartTake{ctx: ctx, key: key, cost: cost, each: each}
	if len(t.local) > 0 {
		a.local = t.admissions()
		defer t.admissionsPool.Put(a.local)
	}
	for _, st := range t.steps {
		ref, err := t.takeStep(st, &a)
		if a.err == nil { // not cmp.Or: comparing interfaces costs a call
			a.err = err
		}
		if !ref.refused && (err == nil || ctx.Err() == nil) {
			continue
		}
		a.undo(t)
		if !ref.refused { // admitted, but ctx ended: asked no further
			return a.sum, keylimit.Permit{}, nil, 0, true
		}
		held = t.peekOthers(key, cost, each, ref.at)
		if ref.only && ref.at < 64 {
			held |= 1 << ref.at
		}
		return a.sum, keylimit.Permit{}, nil, held, a.err != nil && ctx.Err() != nil
	}
	if a.err != nil && ctx.Err() != nil {
		a.undo(t)
		return a.sum, keylimit.Permit{}, nil, 0, true
	}
	return a.sum, a.permit, a.charges, 0, false
}

// apartTake is a request that takeApart decides, and what its steps have
// taken so far.
type apartTake struct {
	ctx  context.Context
	key  string
	cost int
	each []keylimit.Result // each policy's Result, in the tier's order
	// sum is the Results of the policies that admitted, combined
	// (Result.And); after a refusal, the refusing step's Result.
	sum      keylimit.Result
	asked    bool // sum holds a policy's Result
	permit   keylimit.Permit
	charges  *charges
	charged  int                   // how many of charges.adms are admitted: a prefix
	local    *[]keylimit.Admission // t.local's admissions, from t.admissionsPool
	admitted int                   // how many of local are admitted: a prefix
	err      error                 // the first step's error
}

// admissions returns a slice for the admissions of t.local, from a pool:
// an array on the stack would be zeroed on every request of the tier.
// Put it back when done.
func (t *tier) admissions() *[]keylimit.Admission {
	if p, ok := t.admissionsPool.Get().(*[]keylimit.Admission); ok {
		return p
	}
	a := make([]keylimit.Admission, len(t.local))
	return &a
}

// refusal says whether a step of takeApart refused, and by which policy:
// at, or for the plain take -1 (its take wrote its policies' Results).
// only says that policy at, a charged one, lacks only what requests in
// flight hold (heldOnly).
type refusal struct {
	refused, only bool
	at            int
}

// takeStep takes a's cost of its key in the step st, into a, writing each
// policy's Result into a.each at its index. It returns the refusal, if the
// step refused, and the first error of its limiters. The step's
// admissions are in a, to give back, even if one of its policies refused.
func (t *tier) takeStep(st step, a *apartTake) (refusal, error) {
	switch st.kind {
	case stepHeld:
		permit, r := t.policies[t.held].tryAcquire(a.ctx, a.key, a.cost)
		a.each[t.held], a.permit = r, permit
		return a.fold(r, t.held), nil
	case stepCharged:
		if a.charges == nil {
			a.charges = &charges{tier: t, key: a.key, cost: a.cost, adms: make([]keylimit.Admission, len(t.charged))}
			a.charges.reported.Store(-1)
		}
		return t.admitCharged(a, st.from, st.to)
	case stepLocal:
		return t.admitLocal(a), nil
	}
	r, err := t.takePlain(a.ctx, a.key, a.cost, a.each)
	return a.fold(r, -1), err
}

// fold adds r, the Result of policy at (-1: of the plain take), to a.sum
// if it admitted; otherwise it makes r a.sum, and returns the refusal.
func (a *apartTake) fold(r keylimit.Result, at int) refusal {
	switch {
	case !r.Allowed:
		a.sum = r
		return refusal{refused: true, at: at}
	case a.asked:
		a.sum = a.sum.And(r)
	default:
		a.sum, a.asked = r, true
	}
	return refusal{}
}

// admitLocal admits a's cost in each policy of t.local, plain ones in
// process, one by one, writing each Result into a.each at the policy's
// index and each Admission into a.local, until one refuses.
func (t *tier) admitLocal(a *apartTake) refusal {
	for k, at := range t.local {
		r, adm := t.policies[at].refunder.Admit(a.key, a.cost)
		a.each[at] = r
		if !r.Allowed {
			return a.fold(r, at)
		}
		(*a.local)[k], a.admitted = adm, k+1
		a.fold(r, at)
	}
	return refusal{}
}

// tryAcquire takes cost slots of key from p, a concurrency policy, under
// ctx if its limiter decides by it.
func (p *policy) tryAcquire(ctx context.Context, key string, cost int) (keylimit.Permit, keylimit.Result) {
	if p.tryCtx != nil {
		return p.tryCtx(ctx, key, cost)
	}
	return p.held.TryAcquire(key, cost)
}

// undo gives back what the steps of a request that does not proceed have
// taken: the plain policies' admissions in process, the charged
// policies', the slots.
func (a *apartTake) undo(t *tier) {
	for k := a.admitted - 1; k >= 0; k-- {
		t.policies[t.local[k]].refunder.Refund(a.key, (*a.local)[k])
	}
	if a.charges != nil {
		t.undoCharged(a.key, a.cost, a.charges.adms[:a.charged])
	}
	a.permit.Release()
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
// policy whose refusal each holds) or, if refuser is -1, but the policies
// of the plain take, whose take reported them so. A remote policy is not
// asked (its Peek would be a round trip for a request already refused):
// its Result is the zero Result, which render leaves out of the fields. It
// returns held, the policies charged by outcome that lack cost only for
// what requests in flight hold (heldOnly).
func (t *tier) peekOthers(key string, cost int, each []keylimit.Result, refuser int) (held uint64) {
	for i, p := range t.policies {
		switch {
		case i == refuser, refuser < 0 && slices.Contains(t.plain, i):
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
