package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/internal/httpfloor"
	"github.com/keylimit/keylimit/quota"
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
	// A bucket that never empties: a token a nanosecond, 100 at most, so
	// that its fields carry numbers of a real quota's few digits
	// ("second";r=99;t=1), as the floor's do.
	plenty := func(name string) quota.Policy {
		return quota.Bucket(name, keylimit.Limit{Events: 1_000_000_000, Period: time.Second, Burst: 100})
	}
	scarce, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1))
	require.NoError(tb, err)
	return []struct {
		name   string
		config httplimit.Config
	}{
		{"header-key/one-policy", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{plenty("second")}}},
		{"client-ip/one-policy", httplimit.Config{Key: httplimit.ClientIP{}.Key, Policies: []quota.Policy{plenty("second")}}},
		{"header-key/two-policies", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{plenty("second"), plenty("hour")}}},
		{"header-key/legacy-fields", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{plenty("second")}, LegacyFields: true}},
		{"header-key/fields-on-refusal", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{plenty("second")}, FieldsOnRefusal: true}},
		{"header-key/on-decision", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{plenty("second")},
			OnDecision: func(*http.Request, quota.Decision) {}}},
		{"header-key/refused", httplimit.Config{Key: httplimit.Header("X-User"), Policies: []quota.Policy{{Name: "hour", Limiter: scarce}}}},
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

// TestAllocs pins the allocations of a request, the middleware's alone
// (the writer's header map is reused, so that its table, which the first
// field of a fresh response allocates, is not counted: behind a handler
// that sets a header of its own, it is the handler's cost):
//
//   - 1 for the field values of this request, one string: RateLimit's,
//     and Retry-After's for a refusal;
//   - 1 for the array behind the fields' values (RateLimit-Policy's value
//     is reused until a quota or window changes), an array no other
//     request shares, so that a handler that writes into a value it was
//     given changes no other response;
//   - with legacy fields, 1 for their three numbers, one string;
//   - for a refusal, none more: the default Deny writes its body (a problem,
//     to a client that sends no Accept) in a pooled buffer, puts the
//     Content-Type value in the fields' array, and lists the violated
//     policies on the stack (Verdict.AppendViolatedPolicies).
//
// A key from a header or an IPv4 peer's address is a part of the request's
// strings, not a copy. The limiters allocate nothing for a key they know; a
// key is created on its first request only, outside these runs.
func TestAllocs(t *testing.T) {
	want := map[string]float64{
		"header-key/one-policy":    2,
		"client-ip/one-policy":     2,
		"header-key/two-policies":  2,
		"header-key/legacy-fields": 3,
		"header-key/refused":       2,
		// No field, so nothing: the key is the header's string, the
		// decision is on the stack.
		"header-key/fields-on-refusal": 0,
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
// clients, beside nop alone on the same requests. The two run in turn, 64
// requests at a time, so that a change in the machine's load falls on both
// alike: ns/op is the middleware's requests, bare-ns/op nop's, and
// overhead-ns/op the difference, all from one run. allocs/op and B/op are
// the middleware's requests, recorder included (bare-allocs/op and
// bare-B/op: a recorder, its header map and its body's buffer). The row
// floor/two-fields is httpfloor.TwoFields, the least a middleware that
// sends the fields can cost; floor/refusal, httpfloor.Refusal, the least a
// refusal that sends them, Retry-After and a problem body can.
func BenchmarkMiddleware(b *testing.B) {
	reqs := benchRequests(1024)
	type row struct {
		name    string
		handler http.Handler
	}
	rows := []row{{"floor/two-fields", httpfloor.TwoFields(nop)}, {"floor/refusal", httpfloor.Refusal()}}
	for _, c := range benchConfigs(b) {
		rows = append(rows, row{c.name, limited(b, c.config)(nop)})
	}
	serve := func(h http.Handler, from, to int) {
		for i := from; i < to; i++ {
			h.ServeHTTP(httptest.NewRecorder(), reqs[i%len(reqs)])
		}
	}
	const turn = 64 // requests of one handler before the other's
	for _, c := range rows {
		b.Run(c.name, func(b *testing.B) {
			serve(c.handler, 0, len(reqs)) // every key exists
			bareAllocs, bareBytes := allocations(func() { serve(nop, 0, 1) })
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			var spent, bare time.Duration
			for i := 0; i < b.N; i += turn {
				to := min(i+turn, b.N)
				t0 := time.Now()
				serve(c.handler, i, to)
				t1 := time.Now()
				serve(nop, i, to)
				spent, bare = spent+t1.Sub(t0), bare+time.Since(t1)
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			n := float64(b.N)
			b.ReportMetric(float64(spent.Nanoseconds())/n, "ns/op")
			b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/op")
			b.ReportMetric(float64((spent-bare).Nanoseconds())/n, "overhead-ns/op")
			// The framework's counts would hold nop's requests too.
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n-bareAllocs, "allocs/op")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n-bareBytes, "B/op")
			b.ReportMetric(bareAllocs, "bare-allocs/op")
			b.ReportMetric(bareBytes, "bare-B/op")
		})
	}
}

// allocations returns the allocations and the bytes allocated of one call
// of f, on average over many.
func allocations(f func()) (allocs, bytes float64) {
	const runs = 1000
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / runs, float64(after.TotalAlloc-before.TotalAlloc) / runs
}

// BenchmarkTransport measures what the Transport adds to a request over its
// Base, here a Base that answers at once without a network: the key, the
// pause lookup and, with a limiter, one Take; with Concurrency, a slot
// taken and given back (the answer has no body, so at once); with
// Throttle, the decision and the answer counted (a 200: never rejected). The bucket and
// the cap are generous enough never to make a request wait.
func BenchmarkTransport(b *testing.B) {
	answer := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return answer, nil })
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1e9).WithBurst(1e9))
	require.NoError(b, err)
	defer lim.Close()
	slots, err := keylimit.NewConcurrency[string](keylimit.MaxConcurrency)
	require.NoError(b, err)
	defer slots.Close()
	req, err := http.NewRequest(http.MethodGet, "http://partner.example/v1/items", nil)
	require.NoError(b, err)
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare-base", base},
		{"transport", &httplimit.Transport{Base: base}},
		{"transport-bucket", &httplimit.Transport{Base: base, Limiter: lim}},
		{"transport-concurrency", &httplimit.Transport{Base: base, Concurrency: slots}},
		{"transport-throttle", &httplimit.Transport{Base: base, Throttle: 2}},
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
