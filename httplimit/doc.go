// Package httplimit rate-limits HTTP with keylimit, on both sides. For
// servers, middleware that answers the way clients can act on: 429 Too Many
// Requests with Retry-After, and the IETF RateLimit and RateLimit-Policy
// fields on every response. For clients, a Transport that keeps outbound
// calls under a partner's limit (a rate, and with Concurrency the calls in
// flight) and backs off when the partner says so.
//
// # The simple case
//
//	limit, err := httplimit.New(httplimit.Config{
//		Key:      httplimit.ClientIP{}.Key,
//		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(60))},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
//
// The middleware has the standard shape, func(http.Handler) http.Handler,
// so it wraps an http.ServeMux, one of its handlers, or anything a router
// such as chi takes. Wrap the handler registered for a route to limit that
// route alone; the Route key reads the ServeMux pattern (Request.Pattern),
// which the ServeMux sets only for the handlers it calls.
//
// # What a request meets
//
// Config.Key names the client: its IP address (ClientIP), a header such as
// an API key (Header), the route (Route), a combination (Join), or any
// function of the request. A request that cannot be keyed is answered 400
// (it lacks what the key needs: quota.ErrNoKey) or 500 (the server is
// misconfigured), or as Config.Error says; it is never counted against a
// key that other such requests share.
//
// Each request then meets one or more named policies (Policy), all or
// nothing: "minute", 10 a minute, and "hour", 500 an hour, on the same key.
// A refused request takes nothing from any policy. Policies count in any
// keylimit.Limiter[string]: TokenBucket, FixedWindow, SlidingWindow,
// SlidingCounter, your own. A policy may bound requests in flight instead
// (quota.Concurrent: a slot held until the handler returns, however it ends),
// and a policy may charge by outcome (quota.Policy.Charge: failed logins, not
// logins; admitted with the whole cost, what the status, or the cost the
// handler reports by quota.ReportCost or Config.CostHeader, does not
// charge is given back when the handler returns).
// Config.Tier picks other policies for some clients (a "gold" tier); a
// request may cost more than 1 (Config.Cost); some requests can be skipped
// (Config.Skip); and a dry run counts and sets the fields but refuses
// nothing (Config.DryRun). Config.OnDecision sees every decision. The
// policies, the decision and the fields are package quota's, which
// grpclimit decides gRPC calls with too: the middleware reads the key, the
// tier and the cost from the request, and answers with what quota decided.
//
// A limiter that takes a context (keylimit.ContextLimiter: the Redis
// limiters) is asked under the request's, and several policies are decided
// in one call (keylimit.All's TakeEach; one Redis script for Redis
// limiters on one client). A request whose client has hung up asks no
// limiter, and one an in-process policy refuses asks no Redis limiter: its
// fields leave the Redis policies out (see quota's "A decision").
//
// # The fields
//
// On every response it counts (on refused ones only, with
// Config.FieldsOnRefusal), the middleware sets the fields of the IETF
// draft draft-ietf-httpapi-ratelimit-headers (the text of its -11, May
// 2026, whose syntax is -10's), as RFC 9651 Structured Field Lists with one
// member per policy, named by a String:
//
//	RateLimit-Policy: "minute";q=10;w=60, "hour";q=500;w=3600
//	RateLimit: "minute";r=3;t=42, "hour";r=493;t=3541
//
// In them:
//
//   - q is the policy's quota: Result.Limit, the Burst of a token bucket or
//     the Events of a window.
//   - w is the time in seconds the quota applies to: for a token bucket,
//     the time an empty bucket takes to refill fully (Burst × Period /
//     Events, which is the Period when Burst is Events), so that q/w is the
//     sustained rate and q the burst; for a window limiter, its Period, or
//     for a limit per period of the calendar the length of the key's current
//     period, a month's or a 25-hour day's (see quota.Policy.Window).
//   - r is what remains of the quota after this request (Result.Remaining).
//   - t is the number of seconds until more quota is available
//     (Result.RefillAfter), the draft's reset parameter as -10 words it
//     ("until additional quota is made available"; -11 calls it the
//     effective window): for a token bucket, until its next token; a
//     sliding window, until its oldest admission leaves; a sliding
//     counter, until its count drops by one; a fixed window, until it
//     ends; 0 when the quota is whole. It is never more than w, and a
//     refusal's Retry-After is never earlier than the t of a policy the
//     request exceeds.
//
// Every number is an Integer: w and t are rounded up to whole seconds, and
// none is ever negative. A name is quoted, with '"' and '\' escaped. The
// partition key parameter (pk) is not sent: it would tell the client the
// key it was counted under.
//
// Config.LegacyFields adds the fields many clients still read, for the
// binding policy (Decision.Policy): X-RateLimit-Limit (q),
// X-RateLimit-Remaining (r) and X-RateLimit-Reset, the Unix time in
// seconds, rounded up, at which the quota is whole again, as GitHub,
// go-chi/httprate and ulule/limiter send it (Config.LegacyResetDelta sends
// the seconds until then instead).
//
// # Refusals
//
// A refused request is answered 429 Too Many Requests, with Retry-After in
// whole seconds, rounded up and never 0, and Cache-Control: no-store. The
// body is an RFC 9457 problem of the draft's type quota-exceeded, naming
// the policies the request exceeded, with what a client needs as extension
// members (there in one line):
//
//	{"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title": "Quota Exceeded", "status": 429, "detail": "rate limit exceeded",
//	 "violated-policies": ["minute"],
//	 "retry_after_seconds": 1, "policy": "minute", "limit": 10, "remaining": 0}
//
// as application/problem+json, to a client that accepts that type (RFC
// 9110: by sending no Accept, as the draft's own example does, or naming
// it, application/* or */*) no less than application/json. A client that
// accepts application/json and not the problem, or prefers JSON, gets the
// JSON body the middleware sent before the draft registered its types:
//
//	{"error":"rate limit exceeded","retry_after_seconds":1,"policy":"minute","limit":10,"remaining":0}
//
// Config.Deny replaces the body (and the status) with your own. A request
// that costs more than a policy's quota can never pass: it is refused
// without Retry-After or retry_after_seconds. When a limiter is at its key
// cap (keylimit.WithMaxKeys) and refuses a key it cannot track, the answer
// is 503 Service Unavailable, a problem of the draft's type
// temporary-reduced-capacity: the server is full, not the client over its
// limit. So is a request an adaptive concurrency policy sheds
// (adaptive.Limiter in quota.Policy.Concurrency, quota.Decision.Shed: the
// server is short of capacity), with its Retry-After; its requests are
// asked at the criticality Config.Criticality gives them, and a handler's
// 503 or 504, a panic or an expired deadline tells it of overload. The
// answers to requests that cannot be decided (400, 500: see
// Config.Error) are JSON, or a problem with a title, status and detail
// only for a request whose Accept names application/problem+json.
//
// # Client addresses behind proxies
//
// ClientIP takes the client's address from the connection (RemoteAddr)
// unless the peer is one of the trusted proxies configured; then from the
// forwarding header (X-Forwarded-For, or the RFC 7239 Forwarded field),
// read from the right: the first address that is not a trusted proxy is
// the client. The leftmost address, which the client itself may have
// written, is never believed. IPv6 clients are keyed by their /64 (or the
// prefix configured), so that rotating addresses within it gains nothing.
// See ClientIP for the details.
//
// # Clients: Transport
//
// Transport is the other side: an http.RoundTripper for a Go client that
// calls a rate-limited API, so that it stays under the limit and backs off
// when told, instead of retrying into a storm of 429s:
//
//	perSecond, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(10).WithBurst(1))
//	if err != nil {
//		log.Fatal(err)
//	}
//	client := &http.Client{Transport: &httplimit.Transport{Limiter: perSecond, Retries: 3}}
//
// Before each request it waits for the end of any pause the server put on
// the request's key (its host, or any KeyFunc), then for its turn at its own
// Limiter under that key (a TokenBucket serves them first come, first
// served), never past the request's deadline. It reads every answer: a 429
// or 503 (or whatever Transport.Refused says is a refusal) with
// Retry-After, or a RateLimit member with r=0, pauses the key for every
// request sharing the Transport, so the fields this package's middleware
// sends are what the Transport acts on. A RateLimit field that is not a
// valid RFC 9651 List is ignored whole, as the draft says a client must. With Retries, it sends an
// idempotent request again after a refusal, once the server's pause and a
// jittered backoff have passed; when they run out, the caller gets the last
// answer. A wait that cannot be made returns a *TransportError that says
// why.
//
// A partner that fails has no Retry-After to give. With Transport.Throttle
// (2 is the usual value) the Transport throttles itself adaptively, per
// key: it rejects a request locally, unsent, with probability
// max(0, (requests − 2 × accepts) / (requests + 1)) over its recent
// requests (ThrottleWindow), so it stops hammering a partner that refuses
// or fails, and sends everything again soon after it recovers; a rejected
// request's *TransportError matches ErrThrottled. With an *adaptive.Limiter
// as Transport.Concurrency, the Transport learns how many requests the
// partner takes at once: a refused or failed request gives its slot back
// by Permit.Drop, and the limit falls.
package httplimit
