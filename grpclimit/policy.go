package grpclimit

import (
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// Policy is one named quota a call counts against: "minute", 10 a minute
// per client. It is quota.Policy, as httplimit.Policy is, and means here
// what it means there: a call meets all the policies of its tier at once,
// all or nothing (keylimit.All), each is one member of the ratelimit and
// ratelimit-policy metadata, and any keylimit.Limiter[string] counts. See
// quota.Policy for its fields (Name, Limiter, Window).
type Policy = quota.Policy

// Bucket returns a Policy named name that counts each key in a new
// keylimit.TokenBucket of l, built with opts. It is quota.Bucket: if l or
// an option is invalid, NewServer reports the error.
func Bucket(name string, l keylimit.Limit, opts ...keylimit.Option) Policy {
	return quota.Bucket(name, l, opts...)
}

// Concurrent returns a concurrency Policy named name: each key may have n
// calls in flight at once, in a new keylimit.Concurrency built with opts.
// It is quota.Concurrent: a call holds its slot from its decision until its
// handler returns (a stream's, when the stream ends), and a call that finds
// none free ends with ResourceExhausted and a RetryInfo of the limiter's
// estimate of when one will be. If n or an option is invalid, NewServer
// reports the error.
func Concurrent(name string, n int, opts ...keylimit.Option) Policy {
	return quota.Concurrent(name, n, opts...)
}

// Decision is what the server interceptor decided for one call: the key,
// the tier and the cost it counted, and the binding policy's state. It is
// quota.Decision, as httplimit.Decision is; Result.RetryAfter is the delay
// the RetryInfo of a refusal carries.
type Decision = quota.Decision
