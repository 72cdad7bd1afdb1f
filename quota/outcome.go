package quota

import (
	"context"
	"sync/atomic"

	"github.com/keylimit/keylimit"
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
	// or httplimit's Config.CostHeader), or -1 if it reported none.
	Reported int
	// Panicked says the handler panicked: Status is then what it wrote
	// before, or 500 (HTTP) or Unknown (gRPC) if nothing.
	Panicked bool
}

// ChargeReported is a Policy.Charge that charges the cost the handler
// reported, or the whole cost if it reported none: a search API charged
// by the rows a query returned, admitted with the most a query may return.
func ChargeReported(o Outcome) int {
	if o.Reported >= 0 {
		return o.Reported
	}
	return o.Cost
}

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
	adms     []keylimit.Admission // adms[i]: of tier.policies[tier.charged[i]]
	reported atomic.Int64         // ReportCost's n, or -1
	done     atomic.Bool          // set by the first Finish or FinishWith
}

// NeedsOutcome reports whether the request's tier has policies charged by
// outcome and the request proceeded holding their admissions: the adapter
// then gives the handler Context's context, and ends the request with
// FinishWith and its Outcome rather than Finish.
func (v *Verdict) NeedsOutcome() bool { return v.charges != nil }

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
// negative) and gives the rest back with its limiter's exact Refund. Only
// the first Finish or FinishWith of a Verdict, or of any copy, gives back.
func (v *Verdict) FinishWith(o Outcome) {
	v.permit.Release()
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
		if free := o.Cost - charge; free > 0 {
			a := c.adms[i]
			a.N = free // a partial refund: see keylimit.Refunder
			p.refunder.Refund(c.key, a)
		}
	}
}

// admitCharged admits cost for key in each policy of t charged by outcome,
// under ctx when the limiter takes one, writing each Result into each at
// the policy's index and each Admission into adms. If one refuses (or ctx
// ends), it gives back what the ones before it took and returns the
// index in t.policies of the one that refused; else -1.
func (t *tier) admitCharged(ctx context.Context, key string, cost int, each []keylimit.Result, adms []keylimit.Admission) (keylimit.Result, int, error) {
	var sum keylimit.Result
	var firstErr error
	for i, at := range t.charged {
		p := t.policies[at]
		var r keylimit.Result
		var err error
		if p.ctxRefunder != nil {
			r, adms[i], err = p.ctxRefunder.AdmitContext(ctx, key, cost)
		} else {
			r, adms[i] = p.refunder.Admit(key, cost)
		}
		each[at] = r
		if firstErr == nil {
			firstErr = err
		}
		if !r.Allowed || err != nil && ctx.Err() != nil {
			t.undoCharged(key, adms[:i])
			return r, at, firstErr
		}
		if i == 0 {
			sum = r
		} else {
			sum = sum.And(r)
		}
	}
	return sum, -1, firstErr
}

// undoCharged gives back adms, the admissions of t's first charged
// policies, whole: the request did not proceed.
func (t *tier) undoCharged(key string, adms []keylimit.Admission) {
	for i := len(adms) - 1; i >= 0; i-- {
		t.policies[t.charged[i]].refunder.Refund(key, adms[i])
	}
}
