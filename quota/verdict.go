package quota

import "github.com/keylimit/keylimit"

// Action is what an adapter does with a request once it is decided.
type Action uint8

const (
	// Proceed: the request goes on to its handler. Every policy admitted
	// it, or a dry run lets it through.
	Proceed Action = iota
	// Refuse: the request is answered with its refusal (HTTP 429,
	// ResourceExhausted), from its Decision.
	Refuse
	// Fail: the request is answered as an error, as one whose key cannot be
	// read is: a policy could not apply its limit to the key
	// (Decision.Result.Err), the server's fault, not the client's.
	Fail
)

// act is the Action for a decision whose binding Result is r.
func act(r *keylimit.Result, dryRun bool) Action {
	switch {
	case dryRun || r.Allowed:
		return Proceed
	case r.Err != nil:
		return Fail
	}
	return Refuse
}

// Verdict is the outcome of Decide for one request: its Decision, the
// Action the adapter takes, and the values of the RateLimit and
// RateLimit-Policy fields that tell the client. It is returned by value:
// a pointer would make every request allocate.
//
// An adapter calls Finish once the request has ended: after the handler,
// for a request that proceeded. The zero Verdict is no decision (an
// adapter's, for a request it skipped or could not key): Finish does
// nothing for it, and its Action says nothing.
type Verdict struct {
	// Decision is what was decided. An adapter may set its Elapsed before
	// it hands the Decision on.
	Decision Decision

	rateLimit       string
	rateLimitPolicy string
	retryAfter      string
	action          Action
	tier            *tier  // the tier decided, for AppendViolatedPolicies; nil in the zero Verdict
	violated        uint64 // bit i: policy i of the tier (of its first 64) could not afford the cost
	// permit holds the slots of the tier's concurrency policy, for a
	// request that proceeded; Finish releases it. Copies of a Verdict share
	// it, and only the first Finish of any of them releases.
	permit keylimit.Permit
	// charges holds the admissions of the tier's policies charged by
	// outcome, for a request that proceeded; FinishWith refunds from them.
	charges *charges
	// adaptive says the tier's concurrency policy is adaptive: its permit
	// is released by the outcome (FinishWith), Drop for overload.
	adaptive bool
}

// Action returns what the adapter does with the request: Proceed, Refuse
// or Fail.
func (v *Verdict) Action() Action { return v.action }

// RateLimit returns the value of the RateLimit field: one member per
// policy of the tier, in order, naming it, with r (what remains, after this
// request) and t (the seconds until the quota is whole again, rounded up):
//
//	"minute";r=3;t=42, "hour";r=493;t=3541
//
// It is "" for an admitted request of a Decider made with
// Config.FieldsOnRefusal, and for the zero Verdict.
func (v *Verdict) RateLimit() string { return v.rateLimit }

// RateLimitPolicy returns the value of the RateLimit-Policy field: one
// member per policy of the tier, in order, naming it, with q (its quota)
// and w (the seconds the quota applies to):
//
//	"minute";q=10;w=60, "hour";q=500;w=3600
//
// It is "" when RateLimit is: an adapter then sets no rate-limit field.
func (v *Verdict) RateLimitPolicy() string { return v.rateLimitPolicy }

// RetryAfter returns the value of the Retry-After field of a refused
// request: its Result.RetryAfter in whole seconds, rounded up, never 0
// (which a client would read as "retry at once"). It returns "" if the
// request is not refused (Action is not Refuse) or can never pass, when no
// retry helps.
func (v *Verdict) RetryAfter() string { return v.retryAfter }

// AppendViolatedPolicies appends to dst the names of the policies that
// refused the request, in the tier's order: the binding policy, and every
// other one that could not afford the request's cost either (of a tier's
// first 64), and returns the extended slice. It appends nothing for a
// request every policy admitted; in a dry run it names the policies that
// would have refused. They are the draft's violated-policies of the
// quota-exceeded problem type. With room in dst (an array on the caller's
// stack) it allocates nothing; AppendViolatedPolicies(nil) is a new slice.
func (v *Verdict) AppendViolatedPolicies(dst []string) []string {
	if v.tier == nil || v.Decision.Result.Allowed {
		return dst
	}
	for i, p := range v.tier.policies {
		if i < 64 && v.violated&(1<<i) != 0 || p.name == v.Decision.Policy {
			dst = append(dst, p.name)
		}
	}
	return dst
}

// Finish ends the request: an adapter calls it once, when the handler of a
// request that proceeded has returned (deferred, so that a handler that
// panics is finished too). It may be called on any Verdict, the zero one
// and a refused one included, which hold nothing. The rate policies of a
// tier take their cost when the request is decided and have nothing to do
// at its end; a concurrency policy's slots are released here. A policy
// charged by outcome keeps the whole cost: Finish is for an end whose
// outcome is unknown (FinishWith says it). A second Finish or FinishWith,
// of the Verdict or of a copy, gives back nothing.
func (v *Verdict) Finish() {
	v.permit.Release()
	if c := v.charges; c != nil && c.done.CompareAndSwap(false, true) {
		c.end()
	}
}
