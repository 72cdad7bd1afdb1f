package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/keylimit/keylimit/quota"
)

// The fields are written in their canonical MIME form, the form net/http
// stores them in: Header.Get("RateLimit") finds "Ratelimit", and header
// names are case-insensitive on the wire.
const (
	fieldRateLimit       = "Ratelimit"
	fieldRateLimitPolicy = "Ratelimit-Policy"
	fieldRetryAfter      = "Retry-After"
	fieldCacheControl    = "Cache-Control"
	fieldContentType     = "Content-Type"
	fieldLegacyLimit     = "X-Ratelimit-Limit"
	fieldLegacyRemaining = "X-Ratelimit-Remaining"
	fieldLegacyReset     = "X-Ratelimit-Reset"
)

// legacy is how the X-RateLimit fields are written.
type legacy struct {
	delta bool        // X-RateLimit-Reset in seconds from now, not a Unix time
	clock clock.Clock // the time of day a Unix time counts from
}

// setFields sets the rate-limit fields of a counted request: RateLimit and
// RateLimit-Policy, with legacy (if not nil) the X-RateLimit ones too, and
// for a refusal Retry-After (unless the request can never pass) and
// Cache-Control: no-store. The field values share one allocated array,
// each slice capped at its one value, so that a handler's Header().Add
// copies instead of writing into its neighbour, and no two requests share
// a value a handler could change. For a refusal that the default Deny
// answers, the array has room for the Content-Type value too: setFields
// returns that slot, a slice of one (nil otherwise).
func setFields(h http.Header, v *quota.Verdict, legacy *legacy, defaultDeny bool) (contentType []string) {
	retryAfter := v.RetryAfter()
	refused := v.Action() == quota.Refuse
	n := 2
	if legacy != nil {
		n += 3
	}
	if refused {
		n += 2
		if defaultDeny {
			n++
		}
	}
	vals := make([]string, n)
	vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
	h[fieldRateLimit], h[fieldRateLimitPolicy] = vals[0:1:1], vals[1:2:2]
	i := 2
	if legacy != nil {
		limit, remaining, reset := ratefields.Legacy(v.Decision.Result)
		if !legacy.delta {
			reset = unixSeconds(legacy.clock.Now().Add(max(v.Decision.Result.ResetAfter, 0)))
		}
		// The three numbers in one string: a Unix time has 10 digits, and
		// strconv.FormatInt would allocate each number above 99.
		var digits [3 * 20]byte
		num := strconv.AppendInt(digits[:0], limit, 10)
		l := len(num)
		num = strconv.AppendInt(num, remaining, 10)
		r := len(num)
		all := string(strconv.AppendInt(num, reset, 10))
		vals[2], vals[3], vals[4] = all[:l], all[l:r], all[r:]
		h[fieldLegacyLimit], h[fieldLegacyRemaining], h[fieldLegacyReset] = vals[2:3:3], vals[3:4:4], vals[4:5:5]
		i = 5
	}
	if refused {
		if retryAfter != "" {
			vals[i] = retryAfter
			h[fieldRetryAfter] = vals[i : i+1 : i+1]
		}
		vals[i+1] = "no-store"
		h[fieldCacheControl] = vals[i+1 : i+2 : i+2]
		if defaultDeny {
			return vals[i+2 : i+3 : i+3]
		}
	}
	return nil
}

// unixSeconds is t as a Unix time in whole seconds, rounded up: a client
// that waits until then has waited until t. A time before the epoch is 0.
func unixSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return max(s, 0)
}
