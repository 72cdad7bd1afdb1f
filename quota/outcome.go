package quota

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/puzpuzpuz/xsync/v3"
)

// Outcome is how a request or call ended, for the policies charged by
// outcome (Policy.Charge): what an adapter knows once the handler has
// returned.
type Outcome struct {
	// Status is the HTTP status of the response (httplimit: the one the
	// handler wrote, 200 if it wrote none), or the gRPC code the call ended
	// with (grpclimit: codes.Code as an int, 0 for OK).
	Status int
	// Cost is what the request was admitted with, its Decision.Cost: the
	// most a policy may charge it.
	Cost int
	// Reported is the cost the handler reported while it ran (ReportCost,
	// or httplimit's Config.CostHeader), or -1 if it reported none. A
	// search API charged by the rows a query returned, admitted with the
	// most a query may return, charges the cost reported, or the whole
	// cost if none was:
	//
	//	Charge: func(o quota.Outcome) int {
	//		if o.Reported < 0 {
	//			return o.Cost
	//		}
	//		return o.Reported
	//	},
	Reported int
	// Panicked says the handler panicked: Status is then what it wrote
	// before, or 500 (HTTP) or Unknown (gRPC) if nothing.
	Panicked bool
	// Expired says the request's context reached its deadline before the
	// handler returned: a timeout, whatever the status.
	//
	// An adaptive concurrency policy (adaptive.Limiter) learns from the
	// outcome: a request ended by overload gives its slot back with
	// keylimit.Permit.Drop. Overload is a panic, Expired, an HTTP status
	// 503 or 504, or a gRPC code Unavailable, DeadlineExceeded or
	// ResourceExhausted.
	Expired bool
}

// overloaded reports whether o is the outcome of a request that failed
// from overload (see Outcome.Expired). The HTTP and gRPC numbers do not
// meet: HTTP statuses start at 100.
func (o Outcome) overloaded() bool {
	switch o.Status {
	case 503, 504, grpcUnavailable, grpcDeadlineExceeded, grpcResourceExhausted:
		return true
	}
	return o.Panicked || o.Expired
}

// The gRPC codes of overload (google.golang.org/grpc/codes), which quota
// does not import.
const (
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
)

// ReportCost reports n as the cost of the request (or call) whose context
// ctx is, for its policies charged by outcome (Outcome.Reported): a
// handler calls it while it runs, with its request's context, once it
// knows (the rows a query returned). A later report replaces an earlier
// one; a negative n is taken as 0. It reports false, and does nothing, if
// ctx is not that of a request decided by a tier with such a policy
// (Verdict.Context made it).
func ReportCost(ctx context.Context, n int) bool {
	c, ok := ctx.Value(reportKey{}).(*charges)
	if !ok {
		return false
	}
	c.reported.Store(int64(max(n, 0)))
	return true
}

// reportKey is the context key of a request's *charges.
type reportKey struct{}

// charges is what a request admitted by a tier with policies charged by
// outcome holds until it ends: each such policy's Admission, and the cost
// the handler reported. Copies of a Verdict share it.
type charges struct {
	tier     *tier
	key      string
	cost     int                  // what the request holds of each policy (see holds)
	adms     []keylimit.Admission // adms[i]: of tier.policies[tier.charged[i]]
	reported atomic.Int64         // ReportCost's n, or -1
	done     atomic.Bool          // set by the first Finish or FinishWith
}

// NeedsOutcome reports whether the request proceeded holding what its end
// must be told of: admissions of policies charged by outcome, or a slot of
// an adaptive concurrency policy (adaptive.Limiter). The adapter then
// gives the handler Context's context, and ends the request with
// FinishWith and its Outcome rather than Finish.
func (v *Verdict) NeedsOutcome() bool {
	return v.charges != nil || v.adaptive && v.action == Proceed
}

// Context returns ctx carrying what ReportCost needs to reach this
// request, if it NeedsOutcome; ctx itself otherwise.
func (v *Verdict) Context(ctx context.Context) context.Context {
	if v.charges == nil {
		return ctx
	}
	return context.WithValue(ctx, reportKey{}, v.charges)
}

// FinishWith ends the request as Finish does, with its outcome o: each
// policy charged by outcome keeps what its Charge says o costs (at most
// Outcome.Cost; Outcome.Reported is filled in from ReportCost when o's is
// negative) and gives the rest back with its limiter's exact Refund. A
// slot of an adaptive concurrency policy is given back with
// keylimit.Permit.Drop if o is overload (see Outcome.Expired), else with
// Release. Only the first Finish or FinishWith of a Verdict, or of any
// copy, gives back.
func (v *Verdict) FinishWith(o Outcome) {
	if o.overloaded() {
		v.permit.Drop()
	} else {
		v.permit.Release()
	}
	c := v.charges
	if c == nil || !c.done.CompareAndSwap(false, true) {
		return
	}
	o.Cost = v.Decision.Cost
	if o.Reported < 0 {
		o.Reported = int(c.reported.Load())
	}
	for i, at := range c.tier.charged {
		p := c.tier.policies[at]
		charge := min(max(p.charge(o), 0), o.Cost)
		free := o.Cost - charge
		if free > 0 {
			a := c.adms[i]
			a.N = free // a partial refund: see keylimit.Refunder
			p.refunder.Refund(c.key, a)
		}
		p.holds.leave(c.key, c.cost, free) // after the refund: see holds
	}
}

// end ends the holds of a request whose whole cost is kept (Finish).
func (c *charges) end() {
	for _, at := range c.tier.charged {
		c.tier.policies[at].holds.leave(c.key, c.cost, 0)
	}
}

// admitCharged admits a's cost of its key in the policies
// t.charged[from:to], charged by outcome, under a.ctx when the limiter
// takes one, writing each Result into a.each at the policy's index and
// each Admission into a.charges.adms, counted in a.charged, until one
// refuses or a.ctx ends after a limiter failed. It returns the refusal, and
// the first error.
func (t *tier) admitCharged(a *apartTake, from, to int) (refusal, error) {
	var firstErr error
	adms := a.charges.adms
	for i := from; i < to; i++ {
		at := t.charged[i]
		p := t.policies[at]
		// Entered before the limiter is asked, so that a refusal sees every
		// request whose admission it met (see holds).
		mark := p.holds.enter(a.key, a.cost)
		var r keylimit.Result
		var err error
		if p.ctxRefunder != nil {
			r, adms[i], err = p.ctxRefunder.AdmitContext(a.ctx, a.key, a.cost)
		} else {
			r, adms[i] = p.refunder.Admit(a.key, a.cost)
		}
		if firstErr == nil {
			firstErr = err
		}
		if !r.Allowed {
			only := heldOnly(&r, a.cost, p.holds.others(a.key, a.cost, mark))
			a.each[at] = r
			p.holds.leave(a.key, a.cost, 0)
			ref := a.fold(r, at)
			ref.only = only
			return ref, firstErr
		}
		a.each[at] = r
		a.charged = i + 1 // given back by undo, if the request does not proceed
		a.fold(r, at)
		if err != nil && a.ctx.Err() != nil {
			return refusal{}, firstErr // takeApart gives it back
		}
	}
	return refusal{}, firstErr
}

// undoCharged gives back adms, the admissions of cost of t's first charged
// policies, whole: the request did not proceed.
func (t *tier) undoCharged(key string, cost int, adms []keylimit.Admission) {
	for i := len(adms) - 1; i >= 0; i-- {
		p := t.policies[t.charged[i]]
		p.refunder.Refund(key, adms[i])
		p.holds.leave(key, cost, cost)
	}
}

// heldRetry is the RetryAfter, and the t, of a refusal caused only by what
// requests in flight hold (Decision.InFlight): when one of them may have
// ended, which a login or an API call does within a second. A client that
// retries then finds the quota given back by those that ended free, or
// refused again, with the window's RetryAfter once they are charged.
const heldRetry = time.Second

// heldOnly reports whether r, a policy charged by outcome's Result for a
// request of cost (its refusal, or its Peek after another policy refused),
// lacks only what requests in flight hold, held: had they all ended free,
// the cost would have fit. It then shortens r's RetryAfter and RefillAfter
// to heldRetry at most.
func heldOnly(r *keylimit.Result, cost int, held int64) bool {
	if r.Remaining >= cost || r.Limit < cost || r.Banned || r.Untracked || r.Err != nil ||
		int64(r.Remaining)+held < int64(cost) {
		return false
	}
	r.RetryAfter = min(r.RetryAfter, heldRetry)
	r.RefillAfter = min(r.RefillAfter, heldRetry)
	return true
}

// holds counts, by key, the cost this process's requests hold of a policy
// charged by outcome, from before the limiter is asked until they end, and
// what their ends gave back: so a refusal sees every admission the limiter
// had counted, and those that ended since, and never takes holds for a
// spent quota (heldOnly). It errs the other way, towards a short
// Retry-After, while other requests of the key are being decided. Other
// instances' requests (a Redis limiter's fleet) are not seen.
type holds struct {
	// m maps a key to its hold; an entry lives while held > 0, so m has at
	// most one for each request in flight. Made by New (compilePolicy).
	m *xsync.MapOf[string, hold]
}

// hold is what one key's requests hold: the cost entered and not left,
// and the cost given back by those that left since the entry was made.
type hold struct {
	held, freed int64
}

// enter adds n to what key's requests hold, and returns the mark others
// counts freed from.
func (h *holds) enter(key string, n int) (mark int64) {
	if n <= 0 {
		return 0 // nothing held: a request of cost 0 is never refused
	}
	e, _ := h.m.Compute(key, func(e hold, _ bool) (hold, bool) {
		e.held += int64(n)
		return e, false
	})
	return e.freed
}

// leave takes n, entered by a request, from what key's requests hold, of
// which the request gave free back. A request leaves after its refund, so
// that a refusal made before the refund counts it (held) and one made
// after sees the quota back.
func (h *holds) leave(key string, n, free int) {
	if n <= 0 {
		return
	}
	h.m.Compute(key, func(e hold, _ bool) (hold, bool) {
		e.held -= int64(n)
		e.freed += int64(free)
		return e, e.held <= 0
	})
}

// others returns what the other requests of key hold, with what they gave
// back since mark, for a request that entered n and has not left.
func (h *holds) others(key string, n int, mark int64) int64 {
	e, _ := h.m.Load(key)
	return e.held - int64(n) + e.freed - mark
}

// count returns what the requests of key hold.
func (h *holds) count(key string) int64 {
	e, _ := h.m.Load(key)
	return e.held
}
