package httplimit

import (
	"fmt"
	"strconv"
	"time"
)

// The fields are written in their canonical MIME form, the form net/http
// stores them in: Header.Get("RateLimit") finds "Ratelimit", and header
// names are case-insensitive on the wire.
const (
	fieldRateLimit       = "Ratelimit"
	fieldRateLimitPolicy = "Ratelimit-Policy"
	fieldRetryAfter      = "Retry-After"
	fieldLegacyLimit     = "X-Ratelimit-Limit"
	fieldLegacyRemaining = "X-Ratelimit-Remaining"
	fieldLegacyReset     = "X-Ratelimit-Reset"
)

// maxSFInteger is the largest Integer a Structured Field may carry (RFC
// 9651, Section 3.3.1: at most 15 digits). Larger values are sent as this.
const maxSFInteger = 999_999_999_999_999

// sfInt clamps n into the range of a Structured Field Integer that a count
// or a number of seconds may take: 0 to maxSFInteger.
func sfInt(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// seconds is d in whole seconds, rounded up: a client that waits this long
// has waited at least d. Negative durations are 0; the result is a valid
// Structured Field Integer.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return sfInt(s)
}

// retryAfterSeconds is the value of Retry-After for a refusal that can pass
// after d: whole seconds rounded up, and never 0, which a client would read
// as "retry at once".
func retryAfterSeconds(d time.Duration) int64 { return max(seconds(d), 1) }

// checkName reports whether s can name a policy: a non-empty RFC 9651
// String, which holds printable ASCII only.
func checkName(s string) error {
	if s == "" {
		return fmt.Errorf("httplimit: a policy has no name")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("httplimit: policy name %q has a byte %#x a Structured Field String cannot hold (printable ASCII only)", s, c)
		}
	}
	return nil
}

// appendSFString appends s, checked by checkName, as an RFC 9651 String:
// quoted, with '"' and '\' escaped.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// appendParam appends the parameter ";key=n" with n an Integer.
func appendParam(b []byte, key string, n int64) []byte {
	b = append(b, ';')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, n, 10)
}
