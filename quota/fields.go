package quota

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keylimit/keylimit"
)

// maxSFInteger is the largest Integer a Structured Field may carry (RFC
// 9651, Section 3.3.1: at most 15 digits). Larger values are sent as this.
const maxSFInteger = 999_999_999_999_999

// sfInt clamps n into the range of a Structured Field Integer that a count
// or a number of seconds may take: 0 to maxSFInteger.
func sfInt(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// seconds is d in whole seconds, rounded up, as the fields carry a time: a
// client that waits this long has waited at least d. Negative durations
// are 0; the result is a valid Structured Field Integer.
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

// RetryAfterSeconds returns the Retry-After of a refused request: its
// Result.RetryAfter in whole seconds, rounded up, and never 0, which a
// client would read as "retry at once"; or false if the request can never
// pass (RetryAfter is keylimit.InfDuration), when no retry helps.
func (d Decision) RetryAfterSeconds() (secs int64, ok bool) {
	if d.Result.RetryAfter == keylimit.InfDuration {
		return 0, false
	}
	return max(seconds(d.Result.RetryAfter), 1), true
}

// Legacy returns the values of the fields many clients still read, for the
// binding policy: X-RateLimit-Limit (q, its quota), X-RateLimit-Remaining
// (r, what remains, at most q), and reset, the seconds until the quota is
// whole again, rounded up. httplimit sends X-RateLimit-Reset as the Unix
// time Result.ResetAfter from now, as the clients of those fields expect,
// and reset itself only with its Config.LegacyResetDelta.
func (d Decision) Legacy() (limit, remaining, reset int64) {
	limit = sfInt(int64(d.Result.Limit))
	return limit, min(sfInt(int64(d.Result.Remaining)), limit), seconds(d.Result.ResetAfter)
}

// checkName reports whether s can name a policy: a non-empty RFC 9651
// String, which holds printable ASCII only.
func checkName(s string) error {
	if s == "" {
		return errors.New("a policy has no name")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("policy name %q has a byte %#x a Structured Field String cannot hold (printable ASCII only)", s, c)
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
