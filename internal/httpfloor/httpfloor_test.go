package httpfloor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFloorsDoWhatTheyMeasure checks that each floor sets what a middleware
// it stands for must: the fields, each in a slice of its own (a handler's
// Add must not write into its neighbour), and for the refusal the status,
// Retry-After and a JSON problem body.
func TestFloorsDoWhatTheyMeasure(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.0.0.1:40000"

	w := httptest.NewRecorder()
	TwoFields(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Ratelimit", "x")
	})).ServeHTTP(w, req)
	require.Equal(t, []string{`"second";r=14;t=1`, "x"}, w.Header()["Ratelimit"])
	require.Equal(t, []string{`"second";q=100;w=1`}, w.Header()["Ratelimit-Policy"])

	w = httptest.NewRecorder()
	Refusal().ServeHTTP(w, req)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	h := w.Header()
	require.Equal(t, `"hour";r=0;t=14`, h.Get("RateLimit"))
	require.Equal(t, `"hour";q=1;w=3600`, h.Get("RateLimit-Policy"))
	require.Equal(t, "14", h.Get("Retry-After"))
	require.Equal(t, "no-store", h.Get("Cache-Control"))
	require.Equal(t, "application/problem+json", h.Get("Content-Type"))
	for _, name := range []string{"Ratelimit", "Ratelimit-Policy", "Retry-After", "Cache-Control", "Content-Type"} {
		require.Equal(t, 1, cap(h[name]), name)
	}
	var problem map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &problem))
	require.Equal(t, float64(429), problem["status"])
}
