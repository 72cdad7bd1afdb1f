package httplimit

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
)

// Policy is one named quota a request counts against: "minute", 10 a minute
// per client. A request meets all the policies of its tier at once, all or
// nothing, and each is one list member of the RateLimit and
// RateLimit-Policy fields:
//
//	RateLimit-Policy: "minute";q=10;w=60
//	RateLimit: "minute";r=3;t=42
//
// Any keylimit.Limiter[string] can count: a TokenBucket, a window limiter,
// a combination made by keylimit.All, your own. Bucket builds a Policy on a
// new TokenBucket.
type Policy struct {
	// Name names the policy in the fields, in the body of a 429 and in each
	// Decision. It must be printable ASCII (the fields carry it as a
	// Structured Field String) and unique among the policies of a tier.
	Name string
	// Limiter counts the requests, by key. A request takes its cost (see
	// Config.Cost, 1 by default) from it. A limiter that cannot give events
	// back (keylimit.Refunder) must be the last policy of its tier: New
	// reports an error otherwise.
	Limiter keylimit.Limiter[string]
	// Window is the w the RateLimit-Policy field announces, the time over
	// which the quota q applies, sent in whole seconds rounded up. 0 derives
	// it on every request (so SetLimit shows at once) from the limit the
	// limiter reports: the key's own if it has a method LimitOf(key string)
	// keylimit.Limit (for keys given their own limit by
	// keylimit.WithKeyLimit), else the limiter's, Limit() keylimit.Limit, as
	// keylimit's limiters have. For a *keylimit.TokenBucket w is the time an
	// empty bucket takes to refill fully, Burst × Period / Events; for any
	// other limiter, the Period. New reports an error if Window is 0 and the
	// limiter reports neither.
	Window time.Duration

	err error // an error from Bucket, reported by New
}

// Bucket returns a Policy named name that counts each key in a new
// keylimit.TokenBucket of l, built with opts (keylimit.WithClock,
// keylimit.WithMaxKeys, ...). If l or an option is invalid, New reports the
// error.
//
// The bucket lives as long as the middleware that uses it; its background
// evictor stops once both are unreachable. Build the TokenBucket yourself
// and set Policy.Limiter to keep a handle on it (to Reset a key, say).
func Bucket(name string, l keylimit.Limit, opts ...keylimit.Option) Policy {
	b, err := keylimit.NewTokenBucket[string](l, opts...)
	if err != nil {
		return Policy{Name: name, err: fmt.Errorf("httplimit: policy %q: %w", name, err)}
	}
	return Policy{Name: name, Limiter: b}
}

// limitReporter is a limiter that tells its Limit, as keylimit's do.
type limitReporter interface {
	Limit() keylimit.Limit
}

// keyLimitReporter is a limiter that tells the Limit each key is under,
// its own from keylimit.WithKeyLimit or the limiter's.
type keyLimitReporter interface {
	LimitOf(key string) keylimit.Limit
}

// policy is a Policy checked by New.
type policy struct {
	name    string
	quoted  string // name as a Structured Field String
	limiter keylimit.Limiter[string]
	window  int64            // Policy.Window in seconds, rounded up; 0: ask the limiter
	limits  limitReporter    // with window 0: the limiter, if it reports its Limit
	limitOf keyLimitReporter // with window 0: the limiter, if it reports each key's
	bucket  bool             // the limiter is a token bucket: w is its full-refill time
	// derived is the last window derived from limits' Limit, kept so that
	// a request under an unchanged Limit does not divide 128-bit numbers.
	derived atomic.Pointer[derivedWindow]
}

// derivedWindow is a w and the Limit it was derived from.
type derivedWindow struct {
	limit   keylimit.Limit
	seconds int64
}

func compilePolicy(p Policy) (*policy, error) {
	if p.err != nil {
		return nil, p.err
	}
	if err := checkName(p.Name); err != nil {
		return nil, err
	}
	c := &policy{name: p.Name, quoted: string(appendSFString(nil, p.Name)), limiter: p.Limiter, window: seconds(p.Window)}
	switch {
	case p.Limiter == nil:
		return nil, fmt.Errorf("httplimit: policy %q has no Limiter", p.Name)
	case p.Window < 0:
		return nil, fmt.Errorf("httplimit: policy %q: Window %v is negative", p.Name, p.Window)
	case p.Window == 0:
		c.limits, _ = p.Limiter.(limitReporter)
		c.limitOf, _ = p.Limiter.(keyLimitReporter)
		if c.limits == nil && c.limitOf == nil {
			return nil, fmt.Errorf("httplimit: policy %q: set its Window: the limiter (%T) does not report its Limit", p.Name, p.Limiter)
		}
		_, c.bucket = p.Limiter.(*keylimit.TokenBucket[string])
	}
	return c, nil
}

// windowSeconds is the policy's w for key now: a limiter's Limit may
// change while the server runs.
func (p *policy) windowSeconds(key string) int64 {
	if p.window > 0 {
		return p.window
	}
	if p.limitOf != nil {
		// Keys may be under many limits: a cache of one would thrash, and
		// storing in it allocates. Deriving costs a 128-bit division.
		return p.derive(p.limitOf.LimitOf(key))
	}
	l := p.limits.Limit()
	if d := p.derived.Load(); d != nil && d.limit == l {
		return d.seconds
	}
	w := p.derive(l)
	p.derived.Store(&derivedWindow{limit: l, seconds: w})
	return w
}

// derive returns the w of limit l, in seconds.
func (p *policy) derive(l keylimit.Limit) int64 {
	if p.bucket {
		return seconds(refillTime(l))
	}
	return seconds(l.Period)
}

// refillTime is the time an empty token bucket of l takes to refill fully,
// Burst × Period / Events, rounded up to a nanosecond. It is computed in 128
// bits so that it is exact: Burst × Interval would round each token up
// (PerSecond(3) would refill in 1.000000002 s and announce w=2).
func refillTime(l keylimit.Limit) time.Duration {
	if l.Events < 1 || l.Period < 1 || l.BurstSize() < 1 {
		return l.Period
	}
	hi, lo := bits.Mul64(uint64(l.Period), uint64(l.BurstSize()))
	if hi >= uint64(l.Events) {
		return time.Duration(1<<63 - 1) // beyond any w a field can carry
	}
	q, rem := bits.Div64(hi, lo, uint64(l.Events))
	if rem != 0 {
		q++
	}
	return time.Duration(min(q, 1<<63-1))
}

// tier is the set of policies a request meets together.
type tier struct {
	name     string
	policies []*policy
	// decider takes a request's cost from every policy or from none: the
	// one limiter, or keylimit.All of them.
	decider keylimit.Limiter[string]
	// each is decider if it reports each policy's Result (keylimit.All
	// does), with two policies or more; withCtx is decider if it takes a
	// context, with one.
	each    keylimit.EachTaker[string]
	withCtx keylimit.ContextLimiter[string]
	// field is the last RateLimit-Policy value sent, kept so that a request
	// whose quotas and windows have not changed reuses it, unallocated.
	field atomic.Pointer[policyField]
	// resultsPool holds *[]keylimit.Result of len(policies), for decide.
	resultsPool sync.Pool
}

// policyField is a RateLimit-Policy value and the q and w it was made from.
type policyField struct {
	qw    []int64 // q and w of each policy, in turn
	value string
}

func compileTier(name string, ps []Policy) (*tier, error) {
	if len(ps) == 0 {
		if name == "" {
			return nil, fmt.Errorf("httplimit: Config.Policies is empty: give at least one Policy")
		}
		return nil, fmt.Errorf("httplimit: tier %q has no policies", name)
	}
	t := &tier{name: name}
	limiters := make([]keylimit.Limiter[string], 0, len(ps))
	for i, p := range ps {
		c, err := compilePolicy(p)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(t.policies, func(o *policy) bool { return o.name == c.name }) {
			return nil, fmt.Errorf("httplimit: two policies are named %q", c.name)
		}
		// keylimit.All would panic: it must be able to give back what the
		// policies before a refusing one took.
		if _, ok := c.limiter.(keylimit.Refunder[string]); !ok && i < len(ps)-1 {
			return nil, fmt.Errorf("httplimit: policy %q: its limiter (%T) cannot Refund, so it must be the last policy", c.name, c.limiter)
		}
		t.policies = append(t.policies, c)
		limiters = append(limiters, c.limiter)
	}
	t.decider = limiters[0]
	if len(limiters) > 1 {
		t.decider = keylimit.All(limiters...)
		t.each, _ = t.decider.(keylimit.EachTaker[string])
	} else {
		t.withCtx, _ = t.decider.(keylimit.ContextLimiter[string])
	}
	return t, nil
}

// inlinePolicies is how many policies a tier may have before deciding a
// request allocates more than its fixed few.
const inlinePolicies = 4

// decide takes cost for key from every policy of the tier, or from none,
// under ctx, and returns the Decision and the RateLimit and RateLimit-Policy
// values. It returns ctx's error, and no decision, if ctx ended before the
// limiters decided.
func (t *tier) decide(ctx context.Context, key string, cost int) (d Decision, rateLimit, rateLimitPolicy string, err error) {
	var res keylimit.Result
	var each []keylimit.Result // each policy's Result, with two or more
	switch {
	case t.each != nil:
		// One call: every policy's own Result, no Peek after an admission.
		buf := t.results()
		defer t.resultsPool.Put(buf)
		each = *buf
		res, err = t.each.TakeEach(ctx, key, cost, each)
	case t.withCtx != nil:
		res, err = t.withCtx.TakeContext(ctx, key, cost)
	default:
		res = t.decider.Take(key, cost)
	}
	if err != nil && ctx.Err() != nil {
		return Decision{}, "", "", ctx.Err()
	}
	// Any other error is a failure policy's (see keylimit.ContextLimiter):
	// its Result is the decision.

	var buf [32 * inlinePolicies]byte
	field := buf[:0]
	var qwBuf [2 * inlinePolicies]int64
	qw := qwBuf[:0]
	// The policy with the least Remaining, the first that cannot afford
	// cost now, the first that never can (cost above its quota), and the
	// first that cannot apply its limit to the key (Result.Err).
	least, short, never, failed := -1, -1, -1, -1
	var leastRes, shortRes, neverRes, failedRes keylimit.Result
	for i, p := range t.policies {
		r := res
		switch {
		case each != nil:
			r = each[i]
		case len(t.policies) > 1: // All of limiters that cannot report each
			r = p.limiter.Peek(key)
		}
		if i > 0 {
			field = append(field, ", "...)
		}
		q := sfInt(int64(r.Limit))
		field = append(field, p.quoted...)
		field = appendParam(field, "r", min(sfInt(int64(r.Remaining)), q))
		field = appendParam(field, "t", seconds(r.ResetAfter))
		qw = append(qw, q, p.windowSeconds(key))
		if least < 0 || r.Remaining < leastRes.Remaining {
			least, leastRes = i, r
		}
		if short < 0 && r.Remaining < cost {
			short, shortRes = i, r
		}
		if never < 0 && r.Limit < cost {
			never, neverRes = i, r
		}
		if failed < 0 && r.Err != nil {
			failed, failedRes = i, r
		}
	}
	// The binding policy: when all admitted, the one closest to refusing;
	// when refused, one that cannot apply its limit, or else one whose
	// quota the cost exceeds (the request can never pass, even if All
	// stopped at an earlier policy that only lacked tokens now), or else
	// the first that lacked tokens, where All stopped.
	bind, bindRes := least, leastRes
	switch {
	case res.Allowed:
	case failed >= 0:
		bind, bindRes = failed, failedRes
		res.RetryAfter, res.Err = keylimit.InfDuration, failedRes.Err
	case never >= 0:
		bind, bindRes = never, neverRes
		res.RetryAfter = keylimit.InfDuration
	case short >= 0:
		bind, bindRes = short, shortRes
	}
	bindRes.Allowed, bindRes.RetryAfter, bindRes.Untracked, bindRes.Err = res.Allowed, res.RetryAfter, res.Untracked, res.Err
	d = Decision{Key: key, Tier: t.name, Policy: t.policies[bind].name, Cost: cost, Result: bindRes}
	return d, string(field), t.policyField(qw), nil
}

// results returns a slice for each policy's Result, from a pool: passed to
// an interface's method, an array on the stack would escape and allocate on
// every request. Put it back when done.
func (t *tier) results() *[]keylimit.Result {
	if r, ok := t.resultsPool.Get().(*[]keylimit.Result); ok {
		return r
	}
	r := make([]keylimit.Result, len(t.policies))
	return &r
}

// policyField returns the RateLimit-Policy value for these q and w.
func (t *tier) policyField(qw []int64) string {
	if f := t.field.Load(); f != nil && slices.Equal(f.qw, qw) {
		return f.value
	}
	var b []byte
	for i := range t.policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t.policies[i].quoted...)
		b = appendParam(b, "q", qw[2*i])
		b = appendParam(b, "w", qw[2*i+1])
	}
	f := &policyField{qw: slices.Clone(qw), value: string(b)}
	t.field.Store(f)
	return f.value
}
