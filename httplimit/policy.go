package httplimit

import (
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// Policy is one named quota a request counts against: "minute", 10 a minute
// per client. It is quota.Policy, which grpclimit's Policy is too: a request
// meets all the policies of its tier at once, all or nothing, and each is one
// list member of the RateLimit and RateLimit-Policy fields:
//
//	RateLimit-Policy: "minute";q=10;w=60
//	RateLimit: "minute";r=3;t=42
//
// Any keylimit.Limiter[string] can count. See quota.Policy for its fields
// (Name, Limiter, Window).
type Policy = quota.Policy

// Bucket returns a Policy named name that counts each key in a new
// keylimit.TokenBucket of l, built with opts (keylimit.WithClock,
// keylimit.WithMaxKeys, ...). It is quota.Bucket: if l or an option is
// invalid, New reports the error.
//
// The bucket lives as long as the middleware that uses it; its background
// evictor stops once both are unreachable. Build the TokenBucket yourself
// and set Policy.Limiter to keep a handle on it (to Reset a key, say).
func Bucket(name string, l keylimit.Limit, opts ...keylimit.Option) Policy {
	return quota.Bucket(name, l, opts...)
}

// Concurrent returns a concurrency Policy named name: each key may have n
// requests in flight at once, in a new keylimit.Concurrency built with
// opts. It is quota.Concurrent: a request holds its slot from its decision
// until its handler returns, however it ends (a panic included); a request
// that finds none free is refused (429, Retry-After the limiter's estimate
// of when one will be), and it is all or nothing with the rate policies of
// its tier. Its fields have no window and no t:
//
//	RateLimit-Policy: "inflight";q=5;qu="concurrent-requests"
//	RateLimit: "inflight";r=2
//
// If n or an option is invalid, New reports the error.
func Concurrent(name string, n int, opts ...keylimit.Option) Policy {
	return quota.Concurrent(name, n, opts...)
}
