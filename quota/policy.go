package quota

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/puzpuzpuz/xsync/v3"
)

// Policy is one named quota a request counts against: "minute", 10 a minute
// per client. A request meets all the policies of its tier at once, all or
// nothing, and each is one list member of the RateLimit and
// RateLimit-Policy fields (and of the ratelimit and ratelimit-policy
// metadata of a gRPC call):
//
//	RateLimit-Policy: "minute";q=10;w=60
//	RateLimit: "minute";r=3;t=42
//
// Any keylimit.Limiter[string] can count: a TokenBucket, a window limiter,
// a combination made by keylimit.All, your own. Bucket builds a Policy on a
// new TokenBucket.
type Policy struct {
	// Name names the policy in the fields, in the answer to a refused
	// request and in each Decision. It must be printable ASCII (the fields
	// carry it as a Structured Field String) and unique among the policies
	// of a tier.
	Name string
	// Limiter counts the requests, by key. A request takes its cost (1
	// unless the adapter's Config.Cost says otherwise) from it. A limiter
	// that cannot give events back (keylimit.Refunder) must be the last
	// policy of its tier: New reports an error otherwise.
	Limiter keylimit.Limiter[string]
	// Window is the w the RateLimit-Policy field announces, the time over
	// which the quota q applies, sent in whole seconds rounded up. 0 derives
	// it on every request (so SetLimit shows at once) from the limit the
	// limiter reports: the key's own if it has a method LimitOf(key string)
	// keylimit.Limit (for keys given their own limit by a SetKeyLimit
	// function), else the limiter's, Limit() keylimit.Limit, as
	// keylimit's limiters have (a keylimit.Penalty's are those of the
	// limiter it wraps). For a *keylimit.TokenBucket w is the time an
	// empty bucket takes to refill fully, Burst × Period / Events; for a
	// limit per period of the calendar (keylimit.PerCalendar), the length of
	// the key's current period at the limiter's time (LimitOf(key).WindowAt); for
	// any other limiter, the Period. New reports an error if Window is 0 and the
	// limiter reports neither.
	Window time.Duration
	// Concurrency, set instead of Limiter, makes the policy a concurrency
	// quota: a request holds cost slots of its key from its decision until
	// it ends (Verdict.Finish), and is refused while they are not free. Its
	// fields say so, without a window, and without t (see Concurrent):
	//
	//	RateLimit-Policy: "inflight";q=5;qu="concurrent-requests"
	//	RateLimit: "inflight";r=2
	//
	// A tier holds at most one concurrency policy, and its Window stays 0.
	//
	// An adaptive.Limiter here is asked at the criticality the request's
	// context carries (keylimit.WithCriticality), sheds rather than
	// refuses (Decision.Shed: HTTP 503, gRPC Unavailable), and learns from
	// how each request ends: FinishWith gives its slot back with
	// Permit.Drop when the Outcome is overload (see Outcome.Expired),
	// with Release otherwise; so its admitted Verdicts NeedsOutcome.
	Concurrency keylimit.ConcurrencyLimiter[string]
	// Charge, if set, charges a request by its outcome: it is admitted with
	// its whole cost, the most it may be charged, and when it ends
	// (Verdict.FinishWith) Charge says how much of that the Outcome costs
	// (clamped to 0 to Outcome.Cost); the rest is given back by the
	// limiter's exact Refund, so a request whose outcome is free costs
	// nothing in the end. Failed logins, not logins: charge 401s only.
	//
	// Admitting first is what keeps it exact: at no time is more than the
	// quota in use by the requests in flight and those charged, so
	// concurrent requests never pass a quota they are all charged against,
	// and the charged events in any interval are within the limit. The
	// Limiter must be a keylimit.Refunder (every limiter of this module and
	// of redislimit is); the charge is given back from the request's own
	// Admission, so a refund after its window has ended gives nothing back,
	// as the limit requires. A request refused by this or another policy
	// of its tier is charged nothing. The price of admitting first: a
	// request in flight holds its cost until it ends, so 5 logins at once
	// under a quota of 5 failures refuse a sixth, even if all succeed.
	// That refusal says so (Decision.InFlight), and when to retry: in a
	// second, not at the window's end. Only the requests in flight in this
	// process are seen: a fleet's refusal for holds on another instance
	// says the window's end, and a Redis limiter's deny cache on the
	// instance that refused may refuse the key for as long, though
	// refunds there freed it: give such a limiter
	// redislimit.WithDenyCacheSize(0) where that matters.
	Charge func(o Outcome) int

	err error // an error from Bucket, without a package's name, reported by New
}

// Bucket returns a Policy named name that counts each key in a new
// keylimit.TokenBucket of l, built with opts (keylimit.WithClock,
// keylimit.WithMaxKeys, ...). If l or an option is invalid, New reports the
// error.
//
// The bucket lives as long as the Decider that uses it (a middleware's, an
// interceptor's); its background evictor stops once both are unreachable.
// Build the TokenBucket yourself and set Policy.Limiter to keep a handle on
// it (to Reset a key, say).
func Bucket(name string, l keylimit.Limit, opts ...keylimit.Option) Policy {
	b, err := keylimit.NewTokenBucket[string](l, opts...)
	if err != nil {
		return Policy{Name: name, err: fmt.Errorf("policy %q: %w", name, err)}
	}
	return Policy{Name: name, Limiter: b}
}

// limitReporter is a limiter that tells its Limit, as keylimit's do.
type limitReporter interface {
	Limit() keylimit.Limit
}

// keyLimitReporter is a limiter that tells the Limit each key is under,
// its own from a SetKeyLimit function or the limiter's.
type keyLimitReporter interface {
	LimitOf(key string) keylimit.Limit
}

// policy is a Policy checked by New.
type policy struct {
	name    string
	quoted  string // name as a Structured Field String
	limiter keylimit.Limiter[string]
	window  int64                               // Policy.Window in seconds, rounded up; 0: ask the limiter
	limits  limitReporter                       // with window 0: the limiter, if it reports its Limit
	limitOf keyLimitReporter                    // with window 0: the limiter, if it reports each key's
	clock   clock.Clock                         // with window 0: the limiter's (keylimit.WithClock's), nil for the system's
	held    keylimit.ConcurrencyLimiter[string] // a concurrency policy's limiter (limiter is nil)
	// tryCtx is held's TryAcquire under the request's context, if held
	// decides by it (an adaptive.Limiter, by the request's criticality):
	// the policy then sheds (Decision.Shed) rather than refuses, and its
	// permit is dropped when the request ends in overload (FinishWith).
	tryCtx func(ctx context.Context, key string, n int) (keylimit.Permit, keylimit.Result)
	// charge is Policy.Charge; ctxRefunder is the limiter as a
	// ContextLimiter, if it is one, set with charge. refunder is the
	// limiter as a Refunder, if it is one (a charged policy's always is).
	charge      func(Outcome) int
	refunder    keylimit.Refunder[string]
	ctxRefunder contextRefunder
	holds       holds // with charge: what this process's requests hold
	// derived is the last window derived from limits' Limit, kept so that
	// a request under that Limit does not divide 128-bit numbers.
	derived atomic.Pointer[derivedWindow]
	// remaining is quoted and ";r=", how its member of RateLimit begins:
	// one copy a request, not three.
	remaining string
	// remote: the limiter's Stats say Remote, so that its Peek is a round
	// trip, which a refused request does not make (see peekOthers).
	// inProcess: its Stats say it is not (an in-memory limiter's), so that
	// takeApart asks it before any other (see plan). A limiter without
	// Stats is neither.
	remote, inProcess bool
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
	c := &policy{name: p.Name, quoted: string(appendSFString(nil, p.Name)), limiter: p.Limiter, window: ratefields.Seconds(p.Window)}
	c.remaining = c.quoted + ";r="
	switch {
	case p.Concurrency != nil && p.Limiter != nil:
		return nil, fmt.Errorf("policy %q has both a Limiter and a Concurrency: it is one or the other", p.Name)
	case p.Concurrency != nil && p.Window != 0:
		return nil, fmt.Errorf("policy %q: a concurrency policy has no Window (it bounds requests at once, not over time)", p.Name)
	case p.Concurrency != nil && p.Charge != nil:
		return nil, fmt.Errorf("policy %q: a concurrency policy is not charged by outcome (it holds slots, not a count)", p.Name)
	case p.Concurrency != nil:
		c.held = p.Concurrency
		if f, ok := compose.TryContext(p.Concurrency); ok {
			c.tryCtx, _ = f.(func(context.Context, string, int) (keylimit.Permit, keylimit.Result))
		}
	case p.Limiter == nil:
		return nil, fmt.Errorf("policy %q has no Limiter", p.Name)
	case p.Window < 0:
		return nil, fmt.Errorf("policy %q: Window %v is negative", p.Name, p.Window)
	case p.Window == 0:
		// A wrapper that reports the limiter it wraps (a keylimit.Penalty)
		// announces that limiter's window.
		l := p.Limiter
		for range 8 { // a wrapper that wraps itself ends here
			in, _ := compose.Inner(l)
			inner, ok := in.(keylimit.Limiter[string])
			if !ok {
				break
			}
			l = inner
		}
		c.limits, _ = l.(limitReporter)
		c.limitOf, _ = l.(keyLimitReporter)
		c.clock = compose.ClockOf(l)
		if c.limits == nil && c.limitOf == nil {
			return nil, fmt.Errorf("policy %q: set its Window: the limiter (%T) does not report its Limit", p.Name, p.Limiter)
		}
	}
	c.remote, c.inProcess = p.place()
	c.refunder, _ = p.Limiter.(keylimit.Refunder[string])
	if p.Charge != nil {
		if c.refunder == nil {
			return nil, fmt.Errorf("policy %q: charged by outcome, its limiter (%T) must be able to Refund", p.Name, p.Limiter)
		}
		c.ctxRefunder, _ = p.Limiter.(contextRefunder)
		c.charge = p.Charge
		c.holds.m = xsync.NewMapOf[string, hold]()
	}
	return c, nil
}

// place reports where p's limiter keeps its state (see placeOf).
func (p *Policy) place() (remote, inProcess bool) {
	if p.Concurrency != nil {
		return placeOf(p.Concurrency)
	}
	return placeOf(p.Limiter)
}

// placeOf reports whether l is a limiter whose Stats say Remote (remote),
// or one whose Stats say it is not (inProcess); a limiter without Stats is
// neither.
func placeOf(l any) (remote, inProcess bool) {
	st, ok := l.(interface{ Stats() keylimit.Stats })
	if !ok {
		return false, false
	}
	r := st.Stats().Remote
	return r, !r
}

// windowSeconds is the policy's w for key now: a limiter's Limit may
// change while the server runs.
func (p *policy) windowSeconds(key string) int64 {
	if p.held != nil {
		return 0 // no window: the policy field says qu="concurrent-requests"
	}
	if p.window > 0 {
		return p.window
	}
	var l keylimit.Limit
	if p.limitOf != nil {
		l = p.limitOf.LimitOf(key)
	} else {
		l = p.limits.Limit()
	}
	if l.Calendar != 0 {
		// The length of the period the key is in: a month's, a day's of
		// 23 or 25 hours. Computed on every request (the limiter keeps
		// the period's bounds; no division here).
		now := time.Now()
		if p.clock != nil {
			now = p.clock.Now()
		}
		start, end := l.WindowAt(now)
		return ratefields.Seconds(end.Sub(start))
	}
	if d := p.derived.Load(); d != nil && d.limit == l {
		return d.seconds
	}
	w := p.derive(l)
	// The cache holds the limiter's own Limit, which most keys are under.
	// A key's own limit is derived each time (a 128-bit division): keys
	// may be under many limits, and a cache of one would thrash and
	// allocate on every store.
	if p.limitOf == nil || p.limits != nil && l == p.limits.Limit() {
		p.derived.Store(&derivedWindow{limit: l, seconds: w})
	}
	return w
}

// derive returns the w of limit l, in seconds: the time it takes to fill
// from empty, which is a bucket's BurstSize × Period / Events and a
// window's Period (a window's Limit has no Burst).
func (p *policy) derive(l keylimit.Limit) int64 { return ratefields.Seconds(l.FillTime()) }

// contextRefunder is a limiter whose admissions and refunds take a context
// (keylimit.ContextLimiter's AdmitContext and RefundContext).
type contextRefunder interface {
	AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error)
	RefundContext(ctx context.Context, key string, a keylimit.Admission) error
}
