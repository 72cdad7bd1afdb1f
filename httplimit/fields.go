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
	fieldLegacyLimit     = "X-Ratelimit-Limit"
	fieldLegacyRemaining = "X-Ratelimit-Remaining"
	fieldLegacyReset     = "X-Ratelimit-Reset"
)

// setFields sets the rate-limit fields of a counted request, with legacy
// the X-RateLimit ones too. The field values share one allocated array,
// each slice capped at its one value, so that a handler's Header().Add
// copies instead of writing into its neighbour.
func setFields(h http.Header, v *quota.Verdict, legacy bool) {
	if !legacy {
		vals := new([2]string)
		vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
		h[fieldRateLimit], h[fieldRateLimitPolicy] = vals[0:1:1], vals[1:2:2]
		return
	}
	vals := new([5]string)
	vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
	limit, remaining, reset := v.Decision.Legacy()
	vals[2] = strconv.FormatInt(limit, 10)
	vals[3] = strconv.FormatInt(remaining, 10)
	vals[4] = strconv.FormatInt(reset, 10)
	h[fieldRateLimit], h[fieldRateLimitPolicy] = vals[0:1:1], vals[1:2:2]
	h[fieldLegacyLimit], h[fieldLegacyRemaining], h[fieldLegacyReset] = vals[2:3:3], vals[3:4:4], vals[4:5:5]
}
