package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/bounded"
	"github.com/keylimit/keylimit/quota"
)

// Config configures a rate-limiting middleware. Key and Policies are
// required; everything else is optional, and its zero value is the usual
// choice.
type Config struct {
	// Key names the client a request counts against: ClientIP{}.Key,
	// Header("X-API-Key"), Join(ClientIP{}.Key, Route), or your own. A
	// request it cannot key is answered by Error, never counted against a
	// shared key.
	Key KeyFunc

	// Policies are the quotas every request meets, all at once: a request
	// passes only if every policy admits it, and a refused request takes
	// nothing from any (keylimit.All). With Tiers, they are the default
	// tier.
	Policies []quota.Policy

	// Tier, with Tiers, gives clients different quotas: Tier names the
	// tier of a request and its key ("gold", "free"), and the request meets
	// Tiers[name] instead of Policies. A name not in Tiers, "" included,
	// meets Policies. Each tier counts in its own limiters, so a client
	// moved to another tier starts afresh there.
	Tier  func(r *http.Request, key string) string
	Tiers map[string][]quota.Policy

	// Cost is how much of each quota a request takes: 1 if Cost is nil.
	// An expensive endpoint may cost 5. A cost of 0 passes without taking
	// anything; a cost above a policy's quota can never pass and is
	// refused without Retry-After; a negative cost is a programming error,
	// answered by Error. With costs, the fields' q and r count cost units,
	// not requests.
	Cost func(r *http.Request) int

	// Criticality says how much a request matters to an adaptive
	// concurrency policy (adaptive.Limiter in quota.Policy.Concurrency),
	// which sheds Sheddable requests first and Critical ones last: from a
	// header of a trusted proxy, a route, the key. nil leaves the
	// criticality the request's context carries (keylimit.WithCriticality,
	// set by an earlier middleware), Default if none. It is read for the
	// decision only; the handler's context is the request's.
	Criticality func(r *http.Request) keylimit.Criticality

	// Skip exempts the requests it returns true for: they pass without a
	// key, a count or rate-limit fields (health checks, metrics scrapes).
	Skip func(r *http.Request) bool

	// DryRun counts every request and sets every field as usual, and calls
	// OnDecision with the true decision, but lets refused requests through
	// (without Retry-After): to see what a policy would refuse before
	// enforcing it. Requests a policy cannot decide (Result.Err) pass too.
	DryRun bool

	// LegacyFields also sends X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset, which many clients still read, for the binding
	// policy (see quota.Decision). X-RateLimit-Reset is the Unix time in seconds,
	// rounded up, at which the policy's quota is whole again, as GitHub,
	// go-chi/httprate and ulule/limiter send it and their clients read it.
	LegacyFields bool

	// LegacyResetDelta, with LegacyFields, sends X-RateLimit-Reset as the
	// seconds until the quota is whole again, rounded up, instead of a Unix
	// time: for clients of APIs that send it so (and of this package
	// before it sent a Unix time).
	LegacyResetDelta bool

	// FieldsOnRefusal sends the rate-limit fields (RateLimit,
	// RateLimit-Policy and, with LegacyFields, the X-RateLimit ones) on
	// the responses to refused requests only, and leaves an admitted
	// request's response as the handler makes it. For a server that does
	// not tell clients their quota before they exceed it, or that cannot
	// spare what two fields on every response cost (BENCHMARKS.md): an
	// admitted request then allocates nothing in the middleware, and
	// net/http need not copy its header. Clients learn of the quota only
	// when refused, so they cannot pace themselves before. A dry run sends
	// them on the requests it would have refused.
	FieldsOnRefusal bool

	// Clock is where the middleware reads the time of day X-RateLimit-Reset
	// counts from: pass the limiters' clock (keylimit.WithClock) in tests.
	// nil means the system clock.
	Clock clock.Clock

	// OnDecision, if set, is called with every decision, before the
	// handler or Deny runs: count admissions and refusals by policy in
	// Prometheus, or log them. It runs on the request's goroutine and must
	// be safe for concurrent use. Requests answered by Error are not
	// decisions: see them there.
	OnDecision func(r *http.Request, d quota.Decision)

	// Deny answers refused requests. When it runs, the RateLimit fields,
	// Retry-After (unless the request can never pass) and Cache-Control:
	// no-store are already set on w.Header(). If nil, the middleware
	// answers 429 Too Many Requests with an RFC 9457 problem of the
	// draft's type quota-exceeded (application/problem+json), its
	// violated-policies the policies the request exceeded
	// (quota.Verdict.AppendViolatedPolicies):
	//
	//	{"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
	//	 "title": "Quota Exceeded", "status": 429, "detail": "rate limit exceeded",
	//	 "violated-policies": ["minute"],
	//	 "retry_after_seconds": 1, "policy": "minute", "limit": 10, "remaining": 0}
	//
	// or, to a client that accepts application/json and not the problem
	// type, or prefers JSON (by the weights of its Accept, RFC 9110; a
	// request without Accept accepts either), a JSON body:
	//
	//	{"error": "rate limit exceeded", "retry_after_seconds": 1,
	//	 "policy": "minute", "limit": 10, "remaining": 0}
	//
	// A refusal because the limiter holds as many keys as it may
	// (keylimit.WithMaxKeys; Result.Untracked) is answered 503 Service
	// Unavailable instead, a problem of the draft's type
	// temporary-reduced-capacity: the server is full, not the client over
	// its limit.
	Deny func(w http.ResponseWriter, r *http.Request, d quota.Decision)

	// Error answers requests the middleware cannot decide: their key
	// cannot be determined, Cost returned a negative number, or a policy's
	// limiter could not apply its limit to the key (Result.Err: an invalid
	// limit from a SetKeyLimit function). err says why. If nil, an error that
	// wraps quota.ErrNoKey is answered 400 Bad Request with its text (the request
	// lacks what the key needs), and any other 500 Internal Server Error
	// with a generic text (the server is misconfigured; its details stay out
	// of the response). Both bodies are JSON, or problem+json on request,
	// like Deny's.
	Error func(w http.ResponseWriter, r *http.Request, err error)

	// CostHeader names a response header by which the handler reports the
	// cost of its request to the policies charged by outcome
	// (quota.Policy.Charge, Outcome.Reported): a decimal number, set before the
	// handler writes its header. The middleware takes it out of the
	// response, so the client never sees it; a value that is not a number
	// of at most 18 digits, or is given twice, is ignored. A handler may
	// call quota.ReportCost with its request's context instead.
	CostHeader string
}

// New returns a middleware that rate-limits the requests of the handler it
// wraps, as c says. It returns an error if c is incomplete or a policy is
// invalid.
//
// The middleware sets the RateLimit and RateLimit-Policy fields on every
// response it counts (see the package documentation; with
// Config.FieldsOnRefusal, on refused ones only), calls the handler if
// every policy admits the request, and answers the request with Deny if
// not. It never wraps the ResponseWriter, so the handler keeps whatever
// interfaces the server's writer has (http.Flusher, http.Hijacker, ...),
// but for a request whose tier has a policy charged by outcome
// (quota.Policy.Charge): its handler's writer records the status, and has Flush
// and Unwrap (http.ResponseController reaches the server's writer by it).
// It is safe for concurrent use, and may wrap any number of handlers: they
// share its limiters.
func New(c Config) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(c)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("httplimit: the middleware cannot wrap a nil http.Handler")
		}
		return &handler{m: m, next: next}
	}, nil
}

// errEnded is wrapped, with the context's error, by the error of a request
// whose context ended before its rate limit was decided.
var errEnded = errors.New("httplimit: the request ended before its rate limit was decided")

// middleware is a checked Config.
type middleware struct {
	key        KeyFunc
	quota      *quota.Decider
	tierOf     func(*http.Request, string) string
	cost       func(*http.Request) int
	critical   func(*http.Request) keylimit.Criticality
	skip       func(*http.Request) bool
	legacy     *legacy // nil: no X-RateLimit fields
	onDecision func(*http.Request, quota.Decision)
	deny       func(http.ResponseWriter, *http.Request, quota.Decision) // nil: the default, deny
	fail       func(http.ResponseWriter, *http.Request, error)
	costHeader string // canonical, or ""
}

func newMiddleware(c Config) (*middleware, error) {
	if c.Key == nil {
		return nil, errors.New("httplimit: Config.Key is nil: say what to key requests by, e.g. httplimit.ClientIP{}.Key")
	}
	if (c.Tier == nil) != (len(c.Tiers) == 0) {
		return nil, errors.New("httplimit: Config.Tier and Config.Tiers go together: set both or neither")
	}
	q, err := quota.New(quota.Config{Policies: c.Policies, Tiers: c.Tiers, DryRun: c.DryRun, FieldsOnRefusal: c.FieldsOnRefusal})
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", errors.Unwrap(err)) // quota.New's reason, said as ours
	}
	m := &middleware{
		key: c.Key, quota: q, tierOf: c.Tier, cost: c.Cost, critical: c.Criticality, skip: c.Skip,
		onDecision: c.OnDecision, deny: c.Deny, fail: c.Error,
	}
	if c.CostHeader != "" {
		m.costHeader = http.CanonicalHeaderKey(c.CostHeader)
	}
	if c.LegacyFields {
		m.legacy = &legacy{delta: c.LegacyResetDelta, clock: c.Clock}
		if m.legacy.clock == nil {
			m.legacy.clock = clock.New()
		}
	}
	if m.fail == nil {
		m.fail = fail
	}
	return m, nil
}

// handler is the middleware around one handler.
type handler struct {
	m    *middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	var v quota.Verdict // 25 words, written in place by decide, not returned
	if err := m.decide(r, &v); err != nil {
		m.fail(w, r, err)
		return
	}
	// Finish holds nothing for a request that does not proceed, and is
	// deferred now so that what one holds (a concurrency policy's slot) is
	// given back however the rest ends, OnDecision or the handler panicking.
	defer v.Finish()
	var contentType []string
	if v.RateLimitPolicy() != "" { // all but an admission under Config.FieldsOnRefusal
		contentType = setFields(w.Header(), &v, m.legacy, m.deny == nil)
	}
	if m.onDecision != nil {
		m.onDecision(r, v.Decision)
	}
	switch {
	case v.Action() == quota.Proceed && v.NeedsOutcome():
		h.serveCharged(w, r, &v)
	case v.Action() == quota.Proceed:
		h.next.ServeHTTP(w, r)
	case m.deny == nil:
		deny(w, r, &v, contentType)
	default:
		m.deny(w, r, v.Decision)
	}
}

// decide translates r into what quota decides by, its key, tier and cost,
// and writes quota's Verdict into *v: the one call into quota a request
// makes. It returns an error, for Config.Error, if r cannot be decided: no
// key, a negative cost, a context that ended, or a policy that cannot
// limit the key (Action Fail, after Finish).
func (m *middleware) decide(r *http.Request, v *quota.Verdict) error {
	var start time.Time
	if m.onDecision != nil {
		start = time.Now()
	}
	key, err := m.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return err
	}
	tier := ""
	if m.tierOf != nil {
		tier = m.tierOf(r, key)
	}
	cost := 1
	if m.cost != nil {
		if cost = m.cost(r); cost < 0 {
			return fmt.Errorf("httplimit: Cost returned %d for %s: a cost is at least 0", cost, bounded.Quote(r.Method+" "+r.URL.Path))
		}
	}
	ctx := r.Context()
	if m.critical != nil {
		ctx = keylimit.WithCriticality(ctx, m.critical(r))
	}
	// The cost is not negative: Decide's only error is the context's, of a
	// request whose client has hung up (before or while it was decided).
	if *v, err = m.quota.Decide(ctx, key, tier, cost); err != nil {
		return fmt.Errorf("%w: %w", errEnded, err)
	}
	d := &v.Decision
	if m.onDecision != nil {
		d.Elapsed = time.Since(start)
	}
	if v.Action() == quota.Fail {
		v.Finish() // holds nothing: the request does not proceed
		// Not the client's doing: the policy cannot be applied to its key.
		return fmt.Errorf("httplimit: policy %q cannot limit key %s: %w", d.Policy, bounded.Quote(key), d.Result.Err)
	}
	return nil
}
