package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// The middleware wraps the handler a ServeMux found, which knows its
// pattern: Route keys by it, and Join keys by client and route.
func TestRouteAndJoin(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Join(httplimit.Header("X-User"), httplimit.Route),
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
		OnDecision: seen.record,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", limit(&ok{}))
	mux.Handle("POST /items", limit(&ok{}))
	srv := serve(t, mux)

	statuses := func(method, path, user string) []int {
		var out []int
		for range 3 {
			req, err := http.NewRequest(method, srv.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("X-User", user)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			out = append(out, resp.StatusCode)
		}
		return out
	}
	limitedOut := []int{200, 200, 429}
	require.Equal(t, limitedOut, statuses("GET", "/items/1", "a|b"))
	require.Equal(t, []int{429, 429, 429}, statuses("GET", "/items/2", "a|b"), "one route, whatever its path values")
	require.Equal(t, limitedOut, statuses("POST", "/items", "a|b"))
	require.Equal(t, limitedOut, statuses("GET", "/items/1", "a"))
	keys := map[string]bool{}
	for _, d := range seen.list() {
		keys[d.Key] = true
	}
	require.Equal(t, map[string]bool{`a\|b|GET /items/{id}`: true, `a\|b|POST /items`: true, `a|GET /items/{id}`: true}, keys)
}
