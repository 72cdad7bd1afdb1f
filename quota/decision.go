package quota

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/keylimit/keylimit"
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
// decide returns nil (a zero one otherwise).
func (d *Decider) decide(ctx context.Context, key, tier string, cost int, v *Verdict) (err error) {
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
	var res keylimit.Result
	var held uint64 // policies that lack only what requests in flight hold (takeApart)
	var one [1]keylimit.Result
	each := one[:] // each policy's Result, looked at by index: a Result is 8 words
	switch {
	case t.apart:
		buf := t.results()
		defer t.resultsPool.Put(buf)
		res, v.permit, v.charges, held, err = t.takeApart(ctx, key, cost, *buf) // not each: one would escape
		each = *buf
	case t.each != nil:
		// One call: every policy's own Result, no Peek after an admission.
		buf := t.results()
		defer t.resultsPool.Put(buf)
		res, err = t.each.TakeEach(ctx, key, cost, *buf)
		each = *buf
	case t.withCtx != nil:
		res, err = t.withCtx.TakeContext(ctx, key, cost)
	default:
		res = t.decider.Take(key, cost)
	}
	if err != nil && ctx.Err() != nil {
		v.permit.Release() // what takeApart took, if the context ended after
		if v.charges != nil {
			t.undoCharged(key, cost, v.charges.adms)
		}
		*v = Verdict{}
		return ctx.Err()
	}
	// Any other error is a failure policy's (see keylimit.ContextLimiter):
	// its Result is the decision.
	switch {
	case t.apart, t.each != nil:
	case len(t.policies) == 1:
		one[0] = res
	default: // All of limiters that cannot report each
		buf := t.results()
		defer t.resultsPool.Put(buf)
		each = *buf
		for i, p := range t.policies {
			each[i] = p.limiter.Peek(key)
		}
	}

	// The fields' values, unless an admitted request sends none.
	format := !d.fieldsOnRefusal || !res.Allowed
	var buf [32 * inlinePolicies]byte
	field := buf[:0]
	var qwBuf [2 * inlinePolicies]int64
	qw := qwBuf[:0]
	// The policy with the least Remaining, the first that cannot afford
	// cost now, the first that never can (cost above its quota), and the
	// first that cannot apply its limit to the key (Result.Err).
	least, short, never, failed := -1, -1, -1, -1
	var violated uint64      // bit i: policy i (of the first 64) cannot afford cost now
	var refill time.Duration // the longest RefillAfter of those that cannot
	for i, p := range t.policies {
		r := &each[i]
		if format {
			if i > 0 {
				field = append(field, ", "...)
			}
			q := sfInt(int64(r.Limit))
			field = strconv.AppendInt(append(field, p.remaining...), min(sfInt(int64(r.Remaining)), q), 10)
			w := p.windowSeconds(key)
			// t: until more quota is available (the draft's reset parameter),
			// never beyond the window (a ban's Retry-After runs to its end).
			if i != t.held { // a concurrency policy's t is unknown (see Concurrent)
				field = appendParam(field, "t", min(seconds(r.RefillAfter), w))
			}
			qw = append(qw, q, w)
		}
		if least < 0 || r.Remaining < each[least].Remaining {
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
	// The binding policy: when all admitted, the one closest to refusing;
	// when refused, one that cannot apply its limit, or else one whose
	// quota the cost exceeds (the request can never pass, even if All
	// stopped at an earlier policy that only lacked tokens now), or else
	// the first that lacked tokens, where All stopped.
	bind := least
	inFlight := false
	switch {
	case res.Allowed:
	case failed >= 0:
		bind = failed
		res.RetryAfter, res.Err = keylimit.InfDuration, each[failed].Err
	case never >= 0:
		bind = never
		res.RetryAfter = keylimit.InfDuration
	case short >= 0:
		bind = short
		// The request needs more of each policy it cannot afford: it
		// passes no earlier than each has more (Retry-After >= t).
		res.RetryAfter = max(res.RetryAfter, refill)
		// Short of nothing but what requests in flight hold: says so.
		inFlight = violated&^held == 0 && len(t.policies) <= 64
	}
	// The Verdict is built in place, field by field: it is 25 words.
	dec := &v.Decision
	dec.Key, dec.Tier, dec.Policy, dec.Cost, dec.Elapsed, dec.InFlight = key, t.name, t.policies[bind].name, cost, 0, inFlight
	b := &dec.Result
	*b = each[bind]
	b.Allowed, b.RetryAfter, b.Untracked, b.Banned, b.Err = res.Allowed, res.RetryAfter, res.Untracked, res.Banned, res.Err
	v.action = act(b, d.dryRun)
	v.tier, v.violated = t, violated
	if !format {
		return nil
	}
	v.rateLimitPolicy = t.policyField(qw)
	// The values of a request's fields are one string, so one allocation:
	// RateLimit's, then Retry-After's.
	n := len(field)
	if v.action == Refuse {
		if secs, ok := v.Decision.RetryAfterSeconds(); ok {
			field = strconv.AppendInt(field, secs, 10)
		}
	}
	values := string(field)
	v.rateLimit, v.retryAfter = values[:n], values[n:]
	return nil
}
