package quota

import (
	"cmp"
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
	// A prefix of t.charged is what takeApart has admitted of them.
	slices.SortStableFunc(t.charged, func(a, b int) int {
		return cmp.Compare(boolInt(!in(a)), boolInt(!in(b)))
	})
	local := 0 // the charged policies in process
	for local < len(t.charged) && in(t.charged[local]) {
		local++
	}
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

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// takeApart decides a request of a tier that cannot be decided in one
// take: one with a concurrency policy (t.held) or policies charged by
// outcome (t.charged). It asks the policies in the order of t.steps (see
// plan), and stops at a refusal, giving back what the steps before took,
// last first. The slots come before the rate policies in each place
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
	// t.local's admissions, on this stack: not in s, whose content
	// escapes (Result.And's arguments do).
	var buf [inlinePolicies]keylimit.Admission
	local := buf[:]
	if len(t.local) > len(buf) {
		local = make([]keylimit.Admission, len(t.local))
	}
	var s apartSum
	for _, st := range t.steps {
		r, ref, err := t.takeStep(ctx, key, cost, each, st, &s, local)
		s.err = cmp.Or(s.err, err)
		if !ref.refused && (err == nil || ctx.Err() == nil) {
			s.and(r)
			continue
		}
		s.undo(t, key, cost, local)
		if !ref.refused { // admitted, but ctx ended: asked no further
			return r, keylimit.Permit{}, nil, 0, true
		}
		held = t.peekOthers(key, cost, each, ref.at)
		if ref.only && ref.at < 64 {
			held |= 1 << ref.at
		}
		return r, keylimit.Permit{}, nil, held, s.err != nil && ctx.Err() != nil
	}
	if s.err != nil && ctx.Err() != nil {
		s.undo(t, key, cost, local)
		return s.sum, keylimit.Permit{}, nil, 0, true
	}
	return s.sum, s.permit, s.charges, 0, false
}

// refusal says whether a step of takeApart refused, and by which policy:
// at, or for the plain take -1 (its take wrote its policies' Results).
// only says that policy at, a charged one, lacks only what requests in
// flight hold (heldOnly).
type refusal struct {
	refused, only bool
	at            int
}

// takeStep takes cost of key in the step st, into s (and t.local's
// admissions into local), writing each policy's Result into each at its
// index. It returns the step's Result (its policies' Results combined, or
// the refusing one's), whether it refused, and the first error of its
// limiters. The step's admissions are in s, to give back, even if one
// refused.
func (t *tier) takeStep(ctx context.Context, key string, cost int, each []keylimit.Result, st step, s *apartSum, local []keylimit.Admission) (keylimit.Result, refusal, error) {
	switch st.kind {
	case stepHeld:
		permit, r := t.policies[t.held].tryAcquire(ctx, key, cost)
		each[t.held] = r
		s.permit = permit
		return r, refusal{refused: !r.Allowed, at: t.held}, nil
	case stepCharged:
		if s.charges == nil {
			s.charges = &charges{tier: t, key: key, cost: cost, adms: make([]keylimit.Admission, len(t.charged))}
			s.charges.reported.Store(-1)
		}
		return t.admitCharged(ctx, key, cost, each, s, st.from, st.to)
	case stepLocal:
		r, ref := t.admitLocal(key, cost, each, local)
		s.local = ref.admitted
		return r, ref.refusal, nil
	}
	r, err := t.takePlain(ctx, key, cost, each)
	return r, refusal{refused: !r.Allowed, at: -1}, err
}

// admitLocal admits cost for key in each policy of t.local, plain ones in
// process, one by one, writing each Result into each at the policy's
// index and each Admission into local, until one refuses.
func (t *tier) admitLocal(key string, cost int, each []keylimit.Result, local []keylimit.Admission) (keylimit.Result, localRefusal) {
	var sum keylimit.Result
	for k, at := range t.local {
		r, adm := t.policies[at].refunder.Admit(key, cost)
		each[at] = r
		if !r.Allowed {
			return r, localRefusal{refusal{refused: true, at: at}, k}
		}
		local[k] = adm
		if k == 0 {
			sum = r
		} else {
			sum = sum.And(r)
		}
	}
	return sum, localRefusal{admitted: len(t.local)}
}

// localRefusal is admitLocal's refusal, and how many it admitted.
type localRefusal struct {
	refusal
	admitted int
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
	charged int   // how many of charges.adms are admitted: a prefix
	local   int   // how many of t.local are admitted: a prefix
	err     error // the first step's error
}

// and adds a step that admitted, with r.
func (s *apartSum) and(r keylimit.Result) {
	if s.asked {
		s.sum = s.sum.And(r)
	} else {
		s.sum, s.asked = r, true
	}
}

// undo gives back what the steps of a request that does not proceed have
// taken, the last first: the plain policies' admissions in process (in
// local), the charged policies', the slots.
func (s *apartSum) undo(t *tier, key string, cost int, local []keylimit.Admission) {
	for k := s.local - 1; k >= 0; k-- {
		t.policies[t.local[k]].refunder.Refund(key, local[k])
	}
	if s.charges != nil {
		t.undoCharged(key, cost, s.charges.adms[:s.charged])
	}
	s.permit.Release()
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
