package quota

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/ratefields"
)

// Decision is what was decided for one request (or call): the key, the
// tier and the cost it counted, and the binding policy's state.
type Decision struct {
	Key  string // the key the request counted under
	Tier string // the tier met: a key of Config.Tiers, or "" for Config.Policies
	Cost int    // what the request asked of each policy
	// Policy names the binding policy: when refused, the one that refused;
	// when admitted, the one with the least Remaining (the first of them).
	Policy string
	// Result is the binding policy's state after the decision: its Limit,
	// Remaining, RefillAfter and ResetAfter. Allowed, RetryAfter,
	// Untracked and Banned (a keylimit.Penalty's ban refused it) are the
	// decision's, over all the policies: RetryAfter is InfDuration if the
	// request can never pass (its cost is above a policy's quota, or Err is
	// set), and otherwise never less than the RefillAfter of a policy that
	// cannot afford the cost now, so that Retry-After never points earlier
	// than that policy's t. Err is the limiter's Result.Err: the key's limit could not be
	// applied; the request is answered as an error (Fail), or passes in a
	// dry run. In a dry run, Allowed false marks a request that would have
	// been refused.
	Result keylimit.Result
	// Elapsed is how long deciding took, as the adapter measured it: the
	// key, the tier and the limiters (a Redis round trip included), on the
	// system's monotonic clock. httplimit and grpclimit measure it only
	// when their Config.OnDecision is set, and leave it 0 otherwise.
	Elapsed time.Duration
	// InFlight reports a refusal caused only by what requests still in
	// flight hold of policies charged by outcome (Policy.Charge): had they
	// all ended free, this one would have passed. Its RetryAfter, and
	// those policies' t, are then a second at most, not the window's end:
	// a retry passes once one of them has ended free.
	InFlight bool
	// Shed reports a refusal by an adaptive concurrency policy (a
	// adaptive.Limiter in Policy.Concurrency): the server is short of
	// capacity, not the client over a quota. Its Action is Refuse; an
	// adapter answers it as overload: HTTP 503 with the problem type
	// temporary-reduced-capacity, gRPC Unavailable, with Retry-After and
	// grpc-retry-pushback-ms as for any refusal.
	Shed bool
}

// inlinePolicies is how many policies a tier may have before deciding a
// request allocates more than its fixed few.
const inlinePolicies = 4

// errNegativeCost is the error of Decide for a cost below 0.
var errNegativeCost = errors.New("quota: a cost is at least 0")

// Decide takes cost for key from every policy of the tier named tier (a
// name not in Config.Tiers, "" included, is Config.Policies), or from none,
// and returns the Verdict. A limiter that takes a context
// (keylimit.ContextLimiter) is asked under ctx, and several policies are
// decided in one call (keylimit.All's TakeEach).
//
// It returns an error, and no Verdict, if cost is negative, or if ctx has
// ended (ctx's error: a request whose client has hung up asks no limiter)
// or ends before the limiters decide. A cost of 0 passes without taking
// anything; a cost above a policy's quota can never pass, and is refused
// with Result.RetryAfter InfDuration.
func (d *Decider) Decide(ctx context.Context, key, tier string, cost int) (v Verdict, err error) {
	// Inlined, so that decide writes the caller's Verdict in place: it is
	// 25 words, which a return by value zeroes and copies twice.
	err = d.decide(ctx, key, tier, cost, &v)
	return v, err
}

// decide is Decide, into *v, a zero Verdict, which holds the Verdict only if
// decide returns nil (a zero one otherwise). It decides in three steps: take
// asks the limiters, bind finds the binding policy, render formats the
// fields.
func (d *Decider) decide(ctx context.Context, key, tier string, cost int, v *Verdict) error {
	t := d.base
	if d.tiers != nil {
		if other, ok := d.tiers[tier]; ok {
			t = other
		}
	}
	if cost < 0 {
		return errNegativeCost
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var tk taken
	if err := t.take(ctx, key, cost, &tk); err != nil {
		return err
	}
	var one [1]keylimit.Result
	each := one[:] // each policy's Result, looked at by index: a Result is 8 words
	if tk.each != nil {
		defer t.resultsPool.Put(tk.each)
		each = *tk.each
	} else {
		one[0] = tk.res
	}
	at, violated, inFlight := t.bind(each, &tk.res, cost, tk.held)
	// The Verdict is built in place, field by field: it is 25 words.
	dec := &v.Decision
	dec.Key, dec.Tier, dec.Policy, dec.Cost, dec.Elapsed, dec.InFlight, dec.Shed = key, t.name, t.policies[at].name, cost, 0, inFlight, false
	b := &dec.Result
	*b = each[at]
	b.Allowed, b.RetryAfter, b.Untracked, b.Banned, b.Err = tk.res.Allowed, tk.res.RetryAfter, tk.res.Untracked, tk.res.Banned, tk.res.Err
	v.action = act(b, d.dryRun)
	v.tier, v.violated, v.permit, v.charges = t, violated, tk.permit, tk.charges
	if t.held >= 0 && t.policies[t.held].tryCtx != nil {
		v.adaptive = true // its permit learns from the outcome
		dec.Shed = at == t.held && !b.Allowed && b.RetryAfter != keylimit.InfDuration && !b.Untracked && b.Err == nil
	}
	if !d.fieldsOnRefusal || !b.Allowed { // the fields' values, unless an admitted request sends none
		t.render(key, each, v)
	}
	return nil
}

// taken is what take asked of a tier's limiters for a request.
type taken struct {
	res keylimit.Result // the decision's, over all the policies
	// each holds each policy's Result, from the tier's pool; nil for a
	// tier of one rate policy, whose Result is res.
	each    *[]keylimit.Result
	permit  keylimit.Permit // the concurrency policy's slots, if it proceeds
	charges *charges        // the charged policies' admissions, if it proceeds
	held    uint64          // if refused: the policies that lack only what requests in flight hold
}

// take asks the tier's limiters for cost of key, all or none, under ctx,
// into *tk. It returns an error only if ctx has ended, having given back
// what it took; any other error is a failure policy's (see
// keylimit.ContextLimiter), whose Result is the decision.
func (t *tier) take(ctx context.Context, key string, cost int, tk *taken) error {
	var err error
	switch {
	case t.apart:
		tk.each = t.results()
		var ended bool // takeApart gave back what it took
		if tk.res, tk.permit, tk.charges, tk.held, ended = t.takeApart(ctx, key, cost, *tk.each); ended {
			t.resultsPool.Put(tk.each)
			return ctx.Err()
		}
	case t.each != nil:
		// One call: every policy's own Result, no Peek after an admission.
		tk.each = t.results()
		tk.res, err = t.each.TakeEach(ctx, key, cost, *tk.each)
	case t.withCtx != nil:
		tk.res, err = t.withCtx.TakeContext(ctx, key, cost)
	default:
		tk.res = t.decider.Take(key, cost)
	}
	if err != nil && ctx.Err() != nil {
		if tk.each != nil {
			t.resultsPool.Put(tk.each)
		}
		return ctx.Err()
	}
	if tk.each == nil && len(t.policies) > 1 { // All of limiters that cannot report each
		tk.each = t.results()
		for i, p := range t.policies {
			(*tk.each)[i] = p.limiter.Peek(key)
		}
	}
	return nil
}

// bind returns the binding policy of a request whose policies answered
// each, and its violated set (bit i: policy i, of the first 64, cannot
// afford cost now), and sets the RetryAfter and Err of res, the decision's
// Result, for a refusal. When all admitted, the binding policy is the one
// closest to refusing (the least Remaining, the first of them); when
// refused, one that cannot apply its limit (Result.Err), or else one whose
// quota the cost exceeds (the request can never pass, even if All stopped
// at an earlier policy that only lacked quota now), or else the first that
// lacked quota, where All stopped. A policy not asked (a remote one after a
// refusal: its Result is the zero Result) is none of these. inFlight
// reports a refusal short of nothing but what requests in flight hold
// (held: the policies that lack only that).
func (t *tier) bind(each []keylimit.Result, res *keylimit.Result, cost int, held uint64) (at int, violated uint64, inFlight bool) {
	least, short, never, failed := -1, -1, -1, -1
	var refill time.Duration // the longest RefillAfter of those that cannot afford cost
	for i := range t.policies {
		r := &each[i]
		switch {
		case t.notAsked(r):
			continue
		case least < 0 || r.Remaining < each[least].Remaining:
			least = i
		}
		if r.Remaining < cost {
			refill = max(refill, r.RefillAfter)
			if i < 64 {
				violated |= 1 << i
			}
			if short < 0 {
				short = i
			}
		}
		if never < 0 && r.Limit < cost {
			never = i
		}
		if failed < 0 && r.Err != nil {
			failed = i
		}
	}
	// least is -1 only if every Result looks not asked: a limiter of the
	// caller's that says Limit 0, for every policy.
	least = max(least, 0)
	switch {
	case res.Allowed:
		return least, violated, false
	case failed >= 0:
		res.RetryAfter, res.Err = keylimit.InfDuration, each[failed].Err
		return failed, violated, false
	case never >= 0:
		res.RetryAfter = keylimit.InfDuration
		return never, violated, false
	case short >= 0:
		// The request needs more of each policy it cannot afford: it
		// passes no earlier than each has more (Retry-After >= t).
		res.RetryAfter = max(res.RetryAfter, refill)
		return short, violated, violated&^held == 0 && len(t.policies) <= 64
	}
	return least, violated, false
}

// notAsked reports whether r is the Result of a policy of t that was not
// asked: the zero Result, whose Limit 0 no limiter reports (see
// keylimit.All's TakeEach), of one of several policies.
func (t *tier) notAsked(r *keylimit.Result) bool {
	return len(t.policies) > 1 && *r == keylimit.Result{} // no panic: a nil Err is never of a type == panics on
}

// render writes the values of the fields of a request of t, whose policies
// answered each, into v, whose Decision and Action are set: RateLimit,
// RateLimit-Policy and, for a refusal, Retry-After. A policy not asked
// (notAsked) has no member in either: its state is not known without a
// round trip.
func (t *tier) render(key string, each []keylimit.Result, v *Verdict) {
	var buf [32 * inlinePolicies]byte
	field := buf[:0]
	var qwBuf [2 * inlinePolicies]int64
	qw := qwBuf[:0]
	for i, p := range t.policies {
		r := &each[i]
		if t.notAsked(r) {
			qw = append(qw, 0, -1) // w -1: no member
			continue
		}
		if len(field) > 0 {
			field = append(field, ", "...)
		}
		q := ratefields.SFInt(int64(r.Limit))
		field = strconv.AppendInt(append(field, p.remaining...), min(ratefields.SFInt(int64(r.Remaining)), q), 10)
		w := p.windowSeconds(key)
		// t: until more quota is available (the draft's reset parameter),
		// never beyond the window (a ban's Retry-After runs to its end).
		if i != t.held { // a concurrency policy's t is unknown (see Concurrent)
			field = appendParam(field, "t", min(ratefields.Seconds(r.RefillAfter), w))
		}
		qw = append(qw, q, w)
	}
	v.rateLimitPolicy = t.policyField(qw)
	// The values of a request's fields are one string, so one allocation:
	// RateLimit's, then Retry-After's.
	n := len(field)
	if v.action == Refuse {
		if secs, ok := ratefields.RetryAfterSeconds(v.Decision.Result); ok {
			field = strconv.AppendInt(field, secs, 10)
		}
	}
	values := string(field)
	v.rateLimit, v.retryAfter = values[:n], values[n:]
}
