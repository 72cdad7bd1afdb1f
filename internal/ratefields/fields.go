// Package ratefields holds what the adapters of this repository share of the
// rate-limit fields beyond what quota's Verdict writes: the numbers of
// Retry-After and of the legacy X-RateLimit fields (httplimit sends them),
// and the client's reader of a RateLimit field (httplimit.Transport and
// grpclimit.Client pause on it).
package ratefields

import (
	"time"

	"github.com/keylimit/keylimit"
)

// MaxSFInteger is the largest Integer a Structured Field may carry (RFC
// 9651, Section 3.3.1: at most 15 digits). Larger values are sent as this.
const MaxSFInteger = 999_999_999_999_999

// SFInt clamps n into the range of a Structured Field Integer that a count
// or a number of seconds may take: 0 to MaxSFInteger.
func SFInt(n int64) int64 { return min(max(n, 0), MaxSFInteger) }

// Seconds is d in whole seconds, rounded up, as the fields carry a time: a
// client that waits this long has waited at least d. Negative durations
// are 0; the result is a valid Structured Field Integer.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return SFInt(s)
}

// RetryAfterSeconds returns the Retry-After of a request refused with r:
// r.RetryAfter in whole seconds, rounded up, and never 0, which a client
// would read as "retry at once"; or false if the request can never pass
// (RetryAfter is keylimit.InfDuration), when no retry helps.
func RetryAfterSeconds(r keylimit.Result) (secs int64, ok bool) {
	if r.RetryAfter == keylimit.InfDuration {
		return 0, false
	}
	return max(Seconds(r.RetryAfter), 1), true
}

// Legacy returns the values of the fields many clients still read, of the
// binding policy's Result r: X-RateLimit-Limit (q, its quota),
// X-RateLimit-Remaining (r, what remains, at most q), and reset, the
// seconds until the quota is whole again, rounded up.
func Legacy(r keylimit.Result) (limit, remaining, reset int64) {
	limit = SFInt(int64(r.Limit))
	return limit, min(SFInt(int64(r.Remaining)), limit), Seconds(r.ResetAfter)
}
