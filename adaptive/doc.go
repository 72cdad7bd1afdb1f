// Package adaptive is a concurrency limiter whose limits find themselves.
// A Limiter, a keylimit.ConcurrencyLimiter, lets each key hold a number of
// slots at once that an Algorithm (AIMD or Gradient) moves between a floor
// and a ceiling, from the latency of the calls it admitted and from the
// calls dropped for overload (keylimit.Permit.Drop); all keys together
// hold no more than an overall limit, which adapts the same way from every
// key's calls.
//
// Under pressure it refuses the key that holds most first, so a tenant
// that takes little still passes, and sheds by the keylimit.Criticality a
// request's context carries (keylimit.WithCriticality): Sheddable requests
// first, Critical ones last, up to a hard bound of three times the overall
// limit. A refusal means "not now"; its RetryAfter is an estimate from
// recent latency. Acquire waits, but not in order: an adaptive limit is
// for shedding load, not queueing it.
//
// A Limiter is safe for concurrent use. TryAcquire and a Permit's Release
// take no lock and, for a key seen before, allocate nothing. Latency is
// measured on the limiter's clock (keylimit.WithClock), and keys are
// tracked, forgotten and capped as by keylimit's limiters, with the same
// options (keylimit.WithEvictionInterval, keylimit.WithMaxKeys,
// keylimit.WithStats). The zero Limiter is not usable: make one with New,
// and Close it when done.
//
// quota, httplimit and grpclimit take a Limiter as a policy's Concurrency
// (quota.Policy.Concurrency): they ask it at each request's criticality
// and Drop the permit of a call that failed from overload.
package adaptive
