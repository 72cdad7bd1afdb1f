package httplimit_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/require"
)

// A request that cannot be keyed is answered without a count, never
// counted under a shared key: 400 when the request lacks the key, 500 when
// the server is misconfigured, or as Config.Error says.
func TestKeyErrors(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	policies := func() []httplimit.Policy {
		return []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(100), mock)}
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

// A client that asks for problem+json gets an RFC 9457 problem.
func TestProblemJSON(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "second", keylimit.PerSecond(1), mock)},
	})(&ok{}))
	get(t, srv.URL, "X-User", "u")
	for _, accept := range []string{"application/problem+json", "application/json, application/problem+json;q=0.9", "text/html,APPLICATION/PROBLEM+JSON"} {
		got := get(t, srv.URL, "X-User", "u", "Accept", accept)
		require.Equal(t, http.StatusTooManyRequests, got.status)
		require.Equal(t, "application/problem+json", got.header.Get("Content-Type"), accept)
		require.JSONEq(t, `{"title":"Too Many Requests","status":429,"detail":"rate limit exceeded","retry_after_seconds":1,"policy":"second","limit":1,"remaining":0}`, got.body)
	}
	for _, accept := range []string{"application/json", "application/problem+json;q=0", "application/problem+json; q=0.000", "application/problem+xml"} {
		got := get(t, srv.URL, "X-User", "u", "Accept", accept)
		require.Equal(t, "application/json", got.header.Get("Content-Type"), accept)
	}
}

// Config.Deny answers refusals its own way, with the fields already set.
func TestCustomDeny(t *testing.T) {
	mock := clock.NewMock()
	// Deny runs on the server's goroutine: it records, the test asserts.
	var (
		mu     sync.Mutex
		denied []httplimit.Decision
		header []http.Header // w.Header() as Deny found it
	)
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "second", keylimit.PerSecond(2), mock)},
		Deny: func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
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
	require.Equal(t, httplimit.Decision{Key: "carol", Policy: "second", Cost: 1, Result: keylimit.Result{
		Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second,
	}}, denied[0])
	require.Equal(t, "1", header[0].Get("Retry-After"), "set before Deny runs")
	require.Equal(t, "no-store", header[0].Get("Cache-Control"), "set before Deny runs")
}

// A limiter at its key cap refuses keys it cannot track: that is 503, not
// 429, with the limiter's hint as Retry-After.
func TestUntrackedKey(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(10), mock, keylimit.WithMaxKeys(1), keylimit.WithEvictionInterval(0))},
		OnDecision: seen.record,
	})(&ok{}))
	require.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "alice").status)
	got := get(t, srv.URL, "X-User", "bob")
	require.Equal(t, http.StatusServiceUnavailable, got.status)
	require.Equal(t, "no-store", got.header.Get("Cache-Control"))
	require.Equal(t, 6, retryAfter(t, got.header), "alice's bucket is full again, and can go, in 6 s")
	body := decodeRefusal(t, got.body)
	require.Equal(t, "the rate limiter is tracking as many clients as it can: try again later", body.Error)
	d := seen.list()[1]
	require.True(t, d.Result.Untracked)
	require.False(t, d.Result.Allowed)
}
