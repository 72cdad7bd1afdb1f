package quota

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
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
	// empty bucket takes to refill fully, Burst × Period / Events; for any
	// other limiter, the Period. New reports an error if Window is 0 and the
	// limiter reports neither.
	Window time.Duration

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
	window  int64            // Policy.Window in seconds, rounded up; 0: ask the limiter
	limits  limitReporter    // with window 0: the limiter, if it reports its Limit
	limitOf keyLimitReporter // with window 0: the limiter, if it reports each key's
	bucket  bool             // the limiter is a token bucket: w is its full-refill time
	// derived is the last window derived from limits' Limit, kept so that
	// a request under that Limit does not divide 128-bit numbers.
	derived atomic.Pointer[derivedWindow]
	// remaining is quoted and ";r=", how its member of RateLimit begins:
	// one copy a request, not three.
	remaining string
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
	c.remaining = c.quoted + ";r="
	switch {
	case p.Limiter == nil:
		return nil, fmt.Errorf("policy %q has no Limiter", p.Name)
	case p.Window < 0:
		return nil, fmt.Errorf("policy %q: Window %v is negative", p.Name, p.Window)
	case p.Window == 0:
		// A wrapper that reports the limiter it wraps (a keylimit.Penalty)
		// announces that limiter's window.
		l := p.Limiter
		for range 8 { // a wrapper that wraps itself ends here
			w, ok := l.(interface {
				Inner() keylimit.Limiter[string]
			})
			if !ok {
				break
			}
			l = w.Inner()
		}
		c.limits, _ = l.(limitReporter)
		c.limitOf, _ = l.(keyLimitReporter)
		if c.limits == nil && c.limitOf == nil {
			return nil, fmt.Errorf("policy %q: set its Window: the limiter (%T) does not report its Limit", p.Name, p.Limiter)
		}
		_, c.bucket = l.(*keylimit.TokenBucket[string])
	}
	return c, nil
}

// windowSeconds is the policy's w for key now: a limiter's Limit may
// change while the server runs.
func (p *policy) windowSeconds(key string) int64 {
	if p.window > 0 {
		return p.window
	}
	var l keylimit.Limit
	if p.limitOf != nil {
		l = p.limitOf.LimitOf(key)
	} else {
		l = p.limits.Limit()
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
