package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// newAdaptive returns an adaptive.Limiter of alg on a mock clock, closed when the
// test ends.
func newAdaptive(t *testing.T, alg adaptive.Algorithm) *adaptive.Limiter[string] {
	t.Helper()
	a, err := adaptive.New[string](alg, keylimit.WithClock(clock.NewMock()))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// nested is a handler that, for a request without X-Inner, sends one with
// it (and the X-Priority given in X-Inner-Priority) through h while it
// holds its own slot, and keeps the inner response.
type nested struct {
	h     http.Handler
	inner *http.Response
}

func (n *nested) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Inner") == "" {
		n.inner = call(n.h, "/", "X-API-Key", "k", "X-Inner", "1", "X-Priority", r.Header.Get("X-Inner-Priority"))
	}
}

// A request an adaptive policy sheds is answered 503 with the problem type
// temporary-reduced-capacity and a Retry-After; a critical one (from
// Config.Criticality) uses the reserve above the limit.
func TestAdaptivePolicySheds503(t *testing.T) {
	a := newAdaptive(t, adaptive.AIMD(1, 2)) // limit 1: a critical request may take 2
	n := &nested{}
	mw := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{{Name: "capacity", Concurrency: a}},
		Criticality: func(r *http.Request) keylimit.Criticality {
			if r.Header.Get("X-Priority") == "critical" {
				return keylimit.Critical
			}
			return keylimit.Default
		},
	})
	n.h = mw(n)

	resp := call(n.h, "/", "X-API-Key", "k", "Accept", "application/problem+json")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	inner := n.inner
	require.Equal(t, http.StatusServiceUnavailable, inner.StatusCode)
	require.Equal(t, "1", inner.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", inner.Header.Get("Content-Type"))
	require.Equal(t, "no-store", inner.Header.Get("Cache-Control"))
	var problem map[string]any
	body, _ := io.ReadAll(inner.Body)
	require.NoError(t, json.Unmarshal(body, &problem))
	require.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", problem["type"])
	require.Equal(t, float64(503), problem["status"])
	require.NotContains(t, problem, "violated-policies")

	call(n.h, "/", "X-API-Key", "k", "X-Inner-Priority", "critical")
	require.Equal(t, http.StatusOK, n.inner.StatusCode, "a critical request has a reserve")
	require.Equal(t, [3]uint64{1, 0, 0}, a.Stats().Shed)
	require.Equal(t, 1, a.Peek("k").Remaining, "every slot given back")
}

// A handler's 503 is overload: a window of 16 of them ends the adaptive
// policy's slow start, its limit at the floor; a window of 200s doubles it.
func TestAdaptivePolicyLearnsFromStatus(t *testing.T) {
	for _, c := range []struct {
		status, want int
	}{{http.StatusOK, 2}, {http.StatusServiceUnavailable, 1}, {http.StatusGatewayTimeout, 1}} {
		a := newAdaptive(t, adaptive.AIMD(1, 10)) // starts at 1, in slow start
		h := limited(t, httplimit.Config{
			Key:      httplimit.Header("X-API-Key"),
			Policies: []quota.Policy{{Name: "capacity", Concurrency: a}},
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(c.status) }))
		for range 16 {
			require.Equal(t, c.status, call(h, "/", "X-API-Key", "k").StatusCode)
		}
		require.Equal(t, c.want, a.Stats().Limit, "status %d", c.status)
	}
}
