package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/keylimit/keylimit/internal/ratefields"
)

// maxServerPause bounds the pause an answer can ask for, so that the
// arithmetic cannot overflow: 10⁹ seconds, about 31 years. A longer
// Retry-After, RateLimit t or HTTP-date is read as this.
const maxServerPause = 1e9 * time.Second

// maxRateLimitField is the most bytes of RateLimit field lines, together,
// that the Transport reads: a real one is a few dozen bytes per policy. A
// longer field is not read (it asks for no pause), so that the work an
// answer makes is bounded by this, not by the response header limit.
const maxRateLimitField = 8 << 10

// serverPause returns the time until which the answer resp, received at now,
// asks the client to send nothing more under the request's key, or the zero
// Time if it asks for no pause. refused says whether the answer refuses the
// request for now (Transport.Refused: 429 and 503 by default).
//
// On a refusal, Retry-After decides if it is there and valid (RFC 9110:
// when both are present, a client follows Retry-After); otherwise the
// RateLimit field, if it is a valid List (the reader ignores any
// other whole): the largest t of its members with r=0, or if none has r=0,
// the largest t. On any other answer only members with r=0 count: a
// server saying "none left for t seconds" on a 200 is obeyed too.
func serverPause(resp *http.Response, refused bool, now time.Time) time.Time {
	if refused {
		if until, ok := retryAfter(resp.Header.Get(fieldRetryAfter), now); ok {
			return afterNow(until, now)
		}
	}
	fields := resp.Header[fieldRateLimit] // canonical already: no allocation
	size := 0
	for _, f := range fields {
		size += len(f) + 1
	}
	if size == 0 || size > maxRateLimitField+1 {
		return time.Time{}
	}
	// RFC 9651 reads the lines of a field as one list, joined by commas.
	// Join returns a lone line as it is.
	exhausted, any := ratefields.ReadRateLimit(strings.Join(fields, ","))
	secs := exhausted
	if secs < 0 && refused {
		secs = any
	}
	if secs <= 0 {
		return time.Time{}
	}
	return now.Add(pauseSeconds(uint64(secs)))
}

// pauseSeconds is secs seconds, at most maxServerPause. It clamps before it
// multiplies: time.Duration(secs)*time.Second wraps from 9,223,372,037 s on.
func pauseSeconds(secs uint64) time.Duration {
	if secs >= uint64(maxServerPause/time.Second) {
		return maxServerPause
	}
	return time.Duration(secs) * time.Second
}

// afterNow returns until, or the zero Time if it is not after now.
func afterNow(until, now time.Time) time.Time {
	if until.After(now) {
		return until
	}
	return time.Time{}
}

// retryAfter parses a Retry-After value (RFC 9110, Section 10.2.3): a
// number of seconds or an HTTP-date, either at most maxServerPause from now.
// It reports false for an absent or invalid value.
func retryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.Trim(v, " \t") // OWS
	if v == "" {
		return time.Time{}, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		// All digits first: ParseUint reports a range error, not a syntax
		// error, for "18700000000000000000A".
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return time.Time{}, false
			}
		}
		secs, _ := strconv.ParseUint(v, 10, 64) // on a range error, the largest uint64
		return now.Add(pauseSeconds(secs)), true
	}
	date, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	if date.Sub(now) > maxServerPause { // Sub saturates: no overflow
		date = now.Add(maxServerPause)
	}
	return date, true
}
