package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// A refusal by a keylimit.Penalty's ban is the draft's
// abnormal-usage-detected problem, with Retry-After at the ban's end and a
// RateLimit t no longer than the window; the refusals before it are
// quota-exceeded.
func TestBannedRefusalBody(t *testing.T) {
	mock := clock.NewMock()
	pen, err := keylimit.NewPenalty[string](newBucket(t, keylimit.PerMinute(1), mock),
		keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour})
	require.NoError(t, err)
	defer pen.Close()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{{Name: "minute", Limiter: pen}},
	})(&ok{}))

	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "u").status)
	got := get(t, srv.URL, "X-User", "u")
	require.Equal(t, http.StatusTooManyRequests, got.status)
	require.Contains(t, got.body, "#quota-exceeded")
	require.Equal(t, "60", got.header.Get("Retry-After"))

	for _, accept := range []string{"", "application/json"} {
		fields := []string{"X-User", "u"}
		if accept != "" {
			fields = append(fields, "Accept", accept)
		}
		got = get(t, srv.URL, fields...)
		require.Equal(t, http.StatusTooManyRequests, got.status)
		require.Equal(t, "3600", got.header.Get("Retry-After"))
		require.Equal(t, `"minute";r=0;t=60`, got.header.Get("RateLimit"))
		if accept == "" {
			require.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
			require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#abnormal-usage-detected","title":"Abnormal Usage Detected","status":429,`+
				`"detail":"too many requests refused by policy \"minute\": refused outright until the ban ends","violated-policies":["minute"],"retry_after_seconds":3600,"policy":"minute","limit":1,"remaining":0}`, got.body)
		} else {
			require.JSONEq(t, `{"error":"too many requests refused by policy \"minute\": refused outright until the ban ends","retry_after_seconds":3600,"policy":"minute","limit":1,"remaining":0}`, got.body)
		}
	}
	require.Equal(t, `"minute";q=1;w=60`, got.header.Get("RateLimit-Policy"), "w is the wrapped bucket's")
	require.Equal(t, uint64(1), pen.Stats().Bans)
	require.Equal(t, uint64(1), pen.Stats().BanRefused) // the third request started the ban, the fourth is the first it refused
}

// A penalty as one policy of a tier: its ban refuses the request (and asks
// nothing of the tier's other policies' limiters to take), the problem
// names it; the other tier is not affected.
func TestBannedInATier(t *testing.T) {
	mock := clock.NewMock()
	pen, err := keylimit.NewPenalty[string](newBucket(t, keylimit.PerMinute(2), mock),
		keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	require.NoError(t, err)
	defer pen.Close()
	hour := newBucket(t, keylimit.PerHour(100), mock)
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{bucket(t, "free", keylimit.PerHour(1), mock)},
		Tier:     func(_ *http.Request, key string) string { return "gold" },
		Tiers: map[string][]quota.Policy{
			"gold": {{Name: "minute", Limiter: pen}, {Name: "hour", Limiter: hour}},
		},
	})(&ok{}))
	for range 2 {
		require.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "u").status)
	}
	got := get(t, srv.URL, "X-User", "u") // refused by the minute: the ban starts
	require.Equal(t, http.StatusTooManyRequests, got.status)
	require.Contains(t, got.body, "#abnormal-usage-detected")
	require.Equal(t, "3600", got.header.Get("Retry-After"))
	for range 3 {
		got = get(t, srv.URL, "X-User", "u")
		require.Contains(t, got.body, "#abnormal-usage-detected")
		require.Contains(t, got.body, `"violated-policies":["minute"]`)
	}
	require.Equal(t, 98, hour.Peek("u").Remaining, "the hour gave back what the refused requests took")
	require.Equal(t, uint64(3), pen.Stats().BanRefused)
	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "v").status, "another key")
}
