// Package quota decides a request against named quotas, whatever carries
// it: the transport-neutral core that httplimit's middleware and
// grpclimit's interceptors share. An adapter reads a key, a tier name and
// a cost from its request or call, asks a Decider, and translates the
// Verdict into its answer; every rule in between is here, once.
//
// # Policies and tiers
//
// A Policy is one named quota, "minute", counted by any
// keylimit.Limiter[string]. A request meets every policy of its tier at
// once, all or nothing (keylimit.All): a refused request takes nothing from
// any. Config.Policies is the default tier; Config.Tiers gives named tiers
// other policies ("gold"), each counted in its own limiters. A concurrency
// policy (Policy.Concurrency, Concurrent) bounds requests in flight
// instead: a request holds its slots from Decide until Verdict.Finish. A
// policy with a Charge is charged by outcome: admitted with the whole cost,
// it gives back what the request's Outcome does not charge in
// Verdict.FinishWith (a handler reports a cost with ReportCost).
//
// # A decision
//
// Decider.Decide(ctx, key, tier, cost) takes cost from every policy of the
// tier, in one call when the limiters can (keylimit.All's TakeEach: one Redis
// script for Redis limiters on one client), under ctx when they take one
// (keylimit.ContextLimiter). It returns a Verdict: the Decision (the key,
// tier and cost, and the binding policy's state), the Action the adapter
// takes (Proceed to the handler, Refuse, or Fail: a limiter could not apply
// the key's limit, the server's fault), and the values of the RateLimit
// and RateLimit-Policy fields.
//
// The policies whose limiters are in the process are asked before the
// others (remote ones, whose Stats say Remote: redislimit's; and those
// without Stats), whatever their kind and the order given: a request one
// of them refuses asks no remote one, to take, to give back or to Peek: no
// round trip. In each place, a concurrency policy is asked first, then the
// policies charged by outcome, then the other rate policies; what those in
// process took is given back in process if a remote one refuses. Of the
// remote policies, the fields of a refused request have members only for
// those whose answer refused it (one Redis script answers for all the
// Redis policies on one client): the others' state is not known without a
// round trip, and their last answer is not kept. A client reads the
// policies it is told of, the one that refused it among them.
//
// The binding policy of a refused request is the one that refused, or one
// whose quota the cost exceeds, before one that is only short now: such a
// request can never pass. Of an admitted request, it is the one with the
// least Remaining. The Decision's Result is that policy's state, with the
// decision's Allowed, RetryAfter and Untracked over all the policies.
//
// # The fields
//
// The fields are those of the IETF draft
// draft-ietf-httpapi-ratelimit-headers (its -11, whose syntax is -10's),
// RFC 9651 Lists with one member per policy, in order, named by a String:
//
//	RateLimit-Policy: "minute";q=10;w=60, "hour";q=500;w=3600
//	RateLimit: "minute";r=3;t=42, "hour";r=493;t=3541
//
// q is the policy's quota (Result.Limit), w the seconds it applies to (see
// Policy.Window), r what remains after this request, t the seconds until
// more quota is available (Result.RefillAfter, -10's reset parameter: a
// bucket's next token, a sliding window's oldest admission leaving, a fixed
// window's end; 0 when the quota is whole), never more than w; every number
// is a non-negative Integer, times rounded up. A refusal's Retry-After is
// never earlier than the t of a policy the request exceeds: whole seconds,
// rounded up, never 0 (Verdict.RetryAfter).
// Verdict.AppendViolatedPolicies names the policies a refused request exceeded,
// for the draft's problem type quota-exceeded.
//
// An adapter calls Verdict.Finish when a request that proceeded has ended,
// or Verdict.FinishWith and its Outcome if the Verdict NeedsOutcome.
//
// # Shedding load
//
// An adaptive.Limiter as a policy's Concurrency finds the server's capacity
// from latency: it is asked at the criticality the request's context
// carries (keylimit.WithCriticality), a refusal is a shed
// (Decision.Shed: the adapter answers 503 with the problem type
// temporary-reduced-capacity, or gRPC Unavailable, with Retry-After), and
// the request's outcome tells it whether the server was overloaded
// (FinishWith: keylimit.Permit.Drop on overload, Release otherwise).
//
// # Cost and concurrency
//
// A decision allocates one string, its RateLimit value (a refusal's holds
// its Retry-After value too), with one policy or several: RateLimit-Policy
// is reused until a quota or window changes, and a tier's Results slice
// comes from a pool. A Decider is safe for concurrent
// use, and its zero value is not usable: make one with New.
package quota
