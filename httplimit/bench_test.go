package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/require"
)

// nop is the bare handler the middleware's overhead is measured over, and
// the allocations counted behind: it does nothing, so that everything
// measured is the middleware's. That includes, on a fresh response, the
// table of the header map, which the first field allocates (about 330
// bytes); behind a handler that sets a header of its own, that table is
// the handler's cost, not the middleware's.
var nop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// reusedWriter is a ResponseWriter whose header map is cleared and reused,
// so that counting allocations counts the middleware's alone.
type reusedWriter struct{ h http.Header }

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusedWriter) WriteHeader(int)             {}

// benchConfigs are the middlewares measured: each admits every request
// (a huge quota on the real clock) unless its name says otherwise.
func benchConfigs(tb testing.TB) []struct {
	name   string
	config httplimit.Config
} {
	plenty := func(name string) httplimit.Policy {
		p := httplimit.Bucket(name, keylimit.PerSecond(1_000_000_000))
		return p
	}
	scarce, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1))
	require.NoError(tb, err)
	return []struct {
		name   string
		config httplimit.Config
	}{
		{"header-key/one-policy", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []httplimit.Policy{plenty("second")}}},
		{"client-ip/one-policy", httplimit.Config{Key: httplimit.ClientIP{}.Key, Policies: []httplimit.Policy{plenty("second")}}},
		{"header-key/two-policies", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []httplimit.Policy{plenty("second"), plenty("hour")}}},
		{"header-key/legacy-fields", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []httplimit.Policy{plenty("second")}, LegacyFields: true}},
		{"header-key/on-decision", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []httplimit.Policy{plenty("second")},
			OnDecision: func(*http.Request, httplimit.Decision) {}}},
		{"header-key/refused", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []httplimit.Policy{{Name: "hour", Limiter: scarce}}}},
	}
}

// benchRequests are n requests from n distinct clients, by address and by
// X-User.
func benchRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodGet, "/api", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:40000", i>>16&255, i>>8&255, i&255)
		r.Header.Set("X-User", fmt.Sprintf("user-%d", i))
		reqs[i] = r
	}
	return reqs
}

// TestAllocs pins the allocations of an admitted request, the middleware's
// alone (the writer's header map is reused):
//
//   - 1 for the RateLimit value, formatted for this request;
//   - 1 for the array behind the two field values (RateLimit-Policy's value
//     is reused until a quota or window changes);
//   - with ClientIP, 1 more for the address as a string, the key.
//
// The limiters allocate nothing for a key they know; a key is created on
// its first request only, outside these runs.
func TestAllocs(t *testing.T) {
	want := map[string]float64{
		"header-key/one-policy":   2,
		"client-ip/one-policy":    3,
		"header-key/two-policies": 2,
		// A 5-value array instead of 2, and one string of the three
		// X-RateLimit numbers.
		"header-key/legacy-fields": 3,
	}
	reqs := benchRequests(16)
	for _, c := range benchConfigs(t) {
		max, ok := want[c.name]
		if !ok {
			continue
		}
		h := limited(t, c.config)(nop)
		w := &reusedWriter{h: http.Header{}}
		for _, r := range reqs { // create the keys
			h.ServeHTTP(w, r)
		}
		i := 0
		got := testing.AllocsPerRun(1000, func() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		})
		require.Equal(t, max, got, c.name)
		t.Logf("%s: %v allocations a request", c.name, got)
	}
}

// BenchmarkMiddleware measures a request through the middleware to nop,
// on an httptest.ResponseRecorder, with no network, over 1024 distinct
// clients. It reports, beside ns/op, nop's time alone on the same requests
// (bare-ns/op) and the difference (overhead-ns/op), so that the overhead
// can be read from one run.
func BenchmarkMiddleware(b *testing.B) {
	reqs := benchRequests(1024)
	for _, c := range benchConfigs(b) {
		b.Run(c.name, func(b *testing.B) {
			h := limited(b, c.config)(nop)
			for _, r := range reqs {
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				h.ServeHTTP(httptest.NewRecorder(), reqs[i%len(reqs)])
			}
			b.StopTimer()
			limitedNs := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			start := time.Now()
			for i := range b.N {
				nop.ServeHTTP(httptest.NewRecorder(), reqs[i%len(reqs)])
			}
			bareNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(bareNs, "bare-ns/op")
			b.ReportMetric(limitedNs-bareNs, "overhead-ns/op")
		})
	}
}

// BenchmarkTransport measures what the Transport adds to a request over its
// Base, here a Base that answers at once without a network: the key, the
// pause lookup and, with a limiter, one Take. The bucket is generous enough
// never to make a request wait.
func BenchmarkTransport(b *testing.B) {
	answer := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return answer, nil })
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1e9).WithBurst(1e9))
	require.NoError(b, err)
	defer lim.Close()
	req, err := http.NewRequest(http.MethodGet, "http://partner.example/v1/items", nil)
	require.NoError(b, err)
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare-base", base},
		{"transport", &httplimit.Transport{Base: base}},
		{"transport-bucket", &httplimit.Transport{Base: base, Limiter: lim}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.rt.RoundTrip(req); err != nil {
					require.NoError(b, err) // only on failure: require's Helper call would be timed
				}
			}
		})
	}
}

// BenchmarkTransportPauses measures a request that the server pauses, under
// a key of its own, while paused=N other keys are paused already: what
// keeping the pauses costs a request as they pile up. Base answers at once,
// 429 with Retry-After: 3600.
func BenchmarkTransportPauses(b *testing.B) {
	refused := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"3600"}}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return refused, nil })
	for _, paused := range []int{5_000, 40_000} {
		b.Run(fmt.Sprintf("paused=%d", paused), func(b *testing.B) {
			tr := &httplimit.Transport{Base: base, Key: httplimit.Header("X-Key")}
			reqs := make([]*http.Request, paused+b.N)
			for i := range reqs {
				r, err := http.NewRequest(http.MethodGet, "http://partner.example/", nil)
				require.NoError(b, err)
				r.Header.Set("X-Key", strconv.Itoa(i))
				reqs[i] = r
			}
			for _, r := range reqs[:paused] {
				if _, err := tr.RoundTrip(r); err != nil {
					require.NoError(b, err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, r := range reqs[paused:] {
				if _, err := tr.RoundTrip(r); err != nil {
					require.NoError(b, err)
				}
			}
		})
	}
}
