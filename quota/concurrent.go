package quota

import (
	"fmt"

	"github.com/keylimit/keylimit"
)

// Concurrent returns a concurrency Policy named name: each key may have n
// requests in flight at once, counted in a new keylimit.Concurrency built
// with opts (keylimit.WithMaxHold, keylimit.WithMaxKeys, ...). If n or an
// option is invalid, New reports the error. Set Policy.Concurrency to a
// limiter of your own to keep a handle on it, or to share it.
//
// A request of its tier takes cost slots (1 unless the adapter's Cost says
// otherwise) with TryAcquire when it is decided, and holds them until the
// adapter calls Verdict.Finish, when the handler has returned, however it
// ended. A request that finds no free slot is refused, its Retry-After the
// limiter's estimate of when one will be (a Concurrency's: from its keys'
// recent hold times). With rate policies in the same tier it is all or
// nothing: a request refused by a rate policy holds no slot, and one
// refused for want of a slot takes nothing from the rate policies.
//
// Its member of RateLimit-Policy has q, the slots, and
// qu="concurrent-requests", and no w: the quota is not over a time. Its
// member of RateLimit has r, the slots still free after the request, and
// no t: when a slot is freed is when a request in flight ends, which the
// server does not know (t is optional in the draft, and a guess would be
// read as a promise). Retry-After carries the estimate on a refusal only.
func Concurrent(name string, n int, opts ...keylimit.Option) Policy {
	c, err := keylimit.NewConcurrency[string](n, opts...)
	if err != nil {
		return Policy{Name: name, err: fmt.Errorf("policy %q: %w", name, err)}
	}
	return Policy{Name: name, Concurrency: c}
}
