package httplimit_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// A request that cannot be keyed is answered without a count, never
// counted under a shared key: 400 when the request lacks the key, 500 when
// the server is misconfigured, or as Config.Error says.
func TestKeyErrors(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	policies := func() []quota.Policy {
		return []quota.Policy{bucket(t, "minute", keylimit.PerMinute(100), mock)}
	}
	byHeader := limited(t, httplimit.Config{Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record})
	byRoute := limited(t, httplimit.Config{Key: httplimit.Route, Policies: policies(), OnDecision: seen.record})
	empty := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "", nil },
		Policies: policies(), OnDecision: seen.record,
	})
	negative := limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record,
		Cost: func(*http.Request) int { return -1 },
	})
	custom := limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record,
		Error: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "who are you? "+err.Error(), http.StatusUnauthorized)
		},
	})
	mux := http.NewServeMux()
	mux.Handle("/header", byHeader(h))
	mux.Handle("/empty", empty(h))
	mux.Handle("/negative", negative(h))
	mux.Handle("/custom", custom(h))
	srv := serve(t, mux)
	// Route around a ServeMux, rather than inside it, finds no pattern.
	inner := http.NewServeMux()
	inner.Handle("GET /route/{id}", h)
	srvRoute := serve(t, byRoute(inner))

	const serverError = `{"error":"httplimit: the server could not apply its rate limit to this request"}`
	for _, c := range []struct {
		name        string
		url         string
		header      []string
		status      int
		contentType string
		body        string // JSON for an application/ type, else text
	}{
		{"no key", srv.URL + "/header", nil, http.StatusBadRequest, "application/json",
			`{"error":"httplimit: the request carries no key: no X-Api-Key header"}`},
		{"no key, problem+json asked", srv.URL + "/header", []string{"X-Api-Key", "", "Accept", "application/problem+json"},
			http.StatusBadRequest, "application/problem+json",
			`{"title":"Bad Request","status":400,"detail":"httplimit: the request carries no key: no X-Api-Key header"}`},
		{"no route pattern", srvRoute.URL + "/route/1", []string{"X-Api-Key", "k"}, http.StatusInternalServerError, "application/json", serverError},
		{"empty key", srv.URL + "/empty", []string{"X-Api-Key", "k"}, http.StatusInternalServerError, "application/json", serverError},
		{"negative cost", srv.URL + "/negative", []string{"X-Api-Key", "k"}, http.StatusInternalServerError, "application/json", serverError},
		{"Config.Error", srv.URL + "/custom", nil, http.StatusUnauthorized, "text/plain; charset=utf-8",
			"who are you? httplimit: the request carries no key: no X-Api-Key header\n"},
	} {
		got := get(t, c.url, c.header...)
		require.Equal(t, c.status, got.status, c.name)
		require.Equal(t, c.contentType, got.header.Get("Content-Type"), c.name)
		if strings.HasPrefix(c.contentType, "application/") {
			require.JSONEq(t, c.body, got.body, c.name)
		} else {
			require.Equal(t, c.body, got.body, c.name)
		}
		require.Empty(t, got.header.Values("RateLimit"), c.name)
	}
	require.Zero(t, h.count(), "no handler ran")
	require.Empty(t, seen.list(), "nothing was decided")
}

// A refusal is an RFC 9457 problem of the draft's quota-exceeded type for
// a client that accepts application/problem+json (RFC 9110 negotiation: by
// name, by a wildcard, or by sending no Accept at all) no less than
// application/json; the JSON body for one that accepts JSON and not the
// problem, prefers JSON, or accepts neither.
func TestRefusalBody(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{bucket(t, "second", keylimit.PerSecond(1), mock)},
	})(&ok{}))
	get(t, srv.URL, "X-User", "u")
	const (
		problem = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,` +
			`"detail":"rate limit exceeded","violated-policies":["second"],"retry_after_seconds":1,"policy":"second","limit":1,"remaining":0}`
		plain = `{"error":"rate limit exceeded","retry_after_seconds":1,"policy":"second","limit":1,"remaining":0}`
	)
	for _, tc := range []struct {
		accept []string // nil: no Accept field
		want   string
	}{
		{nil, problem},
		{[]string{"application/problem+json"}, problem},
		{[]string{"*/*"}, problem},
		{[]string{"application/*"}, problem},
		{[]string{"text/html,APPLICATION/PROBLEM+JSON"}, problem},
		{[]string{"application/json, application/problem+json"}, problem},
		{[]string{"application/json;q=0.5, */*"}, problem},
		{[]string{"text/html", "application/problem+json;q=0.1"}, problem},
		{[]string{"application/json"}, plain},
		{[]string{"application/json, application/problem+json;q=0.9"}, plain},
		{[]string{"application/json, */*;q=0.1"}, plain},
		{[]string{"application/problem+json;q=0"}, plain},
		{[]string{"application/problem+json; q=0.000"}, plain},
		{[]string{"*/*, application/problem+json;q=0"}, plain},
		{[]string{"application/problem+xml"}, plain},
		{[]string{"text/html"}, plain},
	} {
		var fields []string
		for _, a := range tc.accept {
			fields = append(fields, "Accept", a)
		}
		got := get(t, srv.URL, append([]string{"X-User", "u"}, fields...)...)
		require.Equal(t, http.StatusTooManyRequests, got.status)
		want := "application/json"
		if tc.want == problem {
			want = "application/problem+json"
		}
		require.Equal(t, want, got.header.Get("Content-Type"), "Accept %q", tc.accept)
		require.JSONEq(t, tc.want, got.body, "Accept %q", tc.accept)
	}
}

// The problem names every policy a refused request exceeded
// (violated-policies), and a request that can never pass has no
// retry_after_seconds.
func TestRefusalBodyViolatedPolicies(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []quota.Policy{
			bucket(t, "second", keylimit.PerSecond(2), mock),
			bucket(t, "minute", keylimit.PerMinute(3), mock),
			bucket(t, "hour", keylimit.PerHour(100), mock),
		},
		Cost: func(r *http.Request) int { n, _ := strconv.Atoi(r.URL.Query().Get("cost")); return n },
	})(&ok{}))
	require.Equal(t, http.StatusOK, get(t, srv.URL+"?cost=2", "X-User", "u").status)
	for _, tc := range []struct {
		cost     string
		violated []string
		retry    bool
	}{
		{"1", []string{"second"}, true},
		{"2", []string{"second", "minute"}, true},
		{"200", []string{"second", "minute", "hour"}, false},
	} {
		got := get(t, srv.URL+"?cost="+tc.cost, "X-User", "u")
		body := decodeRefusal(t, got.body)
		require.Equal(t, tc.violated, body.ViolatedPolicies, "cost %s", tc.cost)
		require.Equal(t, tc.retry, body.RetryAfterSeconds != nil, "cost %s: retry_after_seconds", tc.cost)
	}
}

// Config.Deny answers refusals its own way, with the fields already set.
func TestCustomDeny(t *testing.T) {
	mock := clock.NewMock()
	// Deny runs on the server's goroutine: it records, the test asserts.
	var (
		mu     sync.Mutex
		denied []quota.Decision
		header []http.Header // w.Header() as Deny found it
	)
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{bucket(t, "second", keylimit.PerSecond(2), mock)},
		Deny: func(w http.ResponseWriter, r *http.Request, d quota.Decision) {
			mu.Lock()
			denied = append(denied, d)
			header = append(header, w.Header().Clone())
			mu.Unlock()
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte("slow down, " + d.Key))
		},
	})(&ok{}))
	for range 2 {
		get(t, srv.URL, "X-User", "carol")
	}
	got := get(t, srv.URL, "X-User", "carol")
	require.Equal(t, http.StatusTeapot, got.status)
	require.Equal(t, "slow down, carol", got.body)
	require.Equal(t, []fields{{"second", 2, 1, 0, 1}}, policyFields(t, got.header))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, denied, 1)
	require.Equal(t, quota.Decision{Key: "carol", Policy: "second", Cost: 1, Result: keylimit.Result{
		Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second, RefillAfter: 500 * time.Millisecond,
	}}, denied[0])
	require.Equal(t, "1", header[0].Get("Retry-After"), "set before Deny runs")
	require.Equal(t, "no-store", header[0].Get("Cache-Control"), "set before Deny runs")
}

// A limiter at its key cap refuses keys it cannot track: that is 503, not
// 429, with the limiter's hint as Retry-After, a problem of the draft's
// temporary-reduced-capacity type.
func TestUntrackedKey(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(10), mock, keylimit.WithMaxKeys(1), keylimit.WithEvictionInterval(0))},
		OnDecision: seen.record,
	})(&ok{}))
	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "alice").status)
	got := get(t, srv.URL, "X-User", "bob")
	require.Equal(t, http.StatusServiceUnavailable, got.status)
	require.Equal(t, "no-store", got.header.Get("Cache-Control"))
	require.Equal(t, 6, retryAfter(t, got.header), "alice's bucket is full again, and can go, in 6 s")
	body := decodeRefusal(t, got.body)
	require.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", body.Type)
	require.Equal(t, "Temporary Reduced Capacity", body.Title)
	require.Equal(t, http.StatusServiceUnavailable, body.Status)
	require.Equal(t, "the rate limiter is tracking as many clients as it can: try again later", body.Detail)
	require.Equal(t, []string{"minute"}, body.ViolatedPolicies, "the policy whose limiter is full")
	plain := decodeRefusal(t, get(t, srv.URL, "X-User", "carol", "Accept", "application/json").body)
	require.Equal(t, "the rate limiter is tracking as many clients as it can: try again later", plain.Error)
	d := seen.list()[1]
	require.True(t, d.Result.Untracked)
	require.False(t, d.Result.Allowed)
}
