package httplimit

import (
	"net/http"
	"strconv"

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

// setFields sets the rate-limit fields of a counted request: RateLimit and
// RateLimit-Policy, with legacy the X-RateLimit ones too, and for a
// refusal Retry-After (unless the request can never pass) and
// Cache-Control: no-store. The field values share one allocated array,
// each slice capped at its one value, so that a handler's Header().Add
// copies instead of writing into its neighbour, and no two requests share
// a value a handler could change.
func setFields(h http.Header, v *quota.Verdict, legacy bool) {
	retryAfter := v.RetryAfter()
	refused := v.Action() == quota.Refuse
	n := 2
	if legacy {
		n += 3
	}
	if refused {
		n += 2
	}
	vals := make([]string, n)
	vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
	h[fieldRateLimit], h[fieldRateLimitPolicy] = vals[0:1:1], vals[1:2:2]
	i := 2
	if legacy {
		// The three numbers are one string, so one allocation.
		var buf [3 * 20]byte
		limit, remaining, reset := v.Decision.Legacy()
		b := strconv.AppendInt(buf[:0], limit, 10)
		l := len(b)
		b = strconv.AppendInt(b, remaining, 10)
		r := len(b)
		b = strconv.AppendInt(b, reset, 10)
		nums := string(b)
		vals[2], vals[3], vals[4] = nums[:l], nums[l:r], nums[r:]
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
	}
}
