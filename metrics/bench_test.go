package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// discardWriter is a ResponseWriter whose header map is reused, so that
// what is measured is the middleware's work and the hook's.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkMiddleware: an httplimit middleware that admits every request
// of 1,024 clients, bare and with HTTP's OnDecision; the difference between
// the rows of one run is what the metrics cost a request.
func BenchmarkMiddleware(b *testing.B) {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api", nil)
		reqs[i].Header.Set("X-User", fmt.Sprintf("user-%d", i))
	}
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, row := range []struct {
		name string
		hook func(*http.Request, quota.Decision)
	}{
		{"bare", nil},
		{"metrics", metrics.NewHTTP("api").OnDecision},
	} {
		b.Run(row.name, func(b *testing.B) {
			limit, err := httplimit.New(httplimit.Config{
				Key:        httplimit.Header("X-User"),
				Policies:   []quota.Policy{quota.Bucket("second", keylimit.PerSecond(1_000_000_000))},
				OnDecision: row.hook,
			})
			require.NoError(b, err, "httplimit.New")
			h := limit(nop)
			w := &discardWriter{h: http.Header{}}
			for _, r := range reqs { // every key known before the timer
				h.ServeHTTP(w, r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				clear(w.h)
				h.ServeHTTP(w, reqs[i&1023])
			}
		})
	}
}

// BenchmarkOnDecision: the hook alone, from every CPU on one label set.
func BenchmarkOnDecision(b *testing.B) {
	hm := metrics.NewHTTP("api")
	d := quota.Decision{Policy: "second", Result: keylimit.Result{Allowed: true}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hm.OnDecision(nil, d)
		}
	})
}
