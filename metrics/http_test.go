package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/keylimit/keylimit/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestHTTPExactCounts: a middleware with two policies on the default tier
// and a "gold" tier, driven through a known sequence on a mock clock; the
// decisions are counted by tier, binding policy and outcome, and each one
// is observed once in the latency histogram of its tier.
func TestHTTPExactCounts(t *testing.T) {
	mock := clock.NewMock()
	hm := metrics.NewHTTP("api")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(hm), "Register")
	var seen []string
	limit, err := httplimit.New(httplimit.Config{
		Key: httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{
			quota.Bucket("minute", keylimit.PerMinute(2), keylimit.WithClock(mock)),
			quota.Bucket("hour", keylimit.PerHour(3), keylimit.WithClock(mock)),
		},
		Tier: func(r *http.Request, key string) string {
			if strings.HasPrefix(key, "gold-") {
				return "gold"
			}
			return ""
		},
		Tiers: map[string][]quota.Policy{
			"gold": {quota.Bucket("minute", keylimit.PerMinute(5), keylimit.WithClock(mock))},
		},
		OnDecision: func(r *http.Request, d quota.Decision) {
			hm.OnDecision(r, d)
			seen = append(seen, d.Policy) // the test's own hook, beside the metrics
		},
	})
	require.NoError(t, err, "httplimit.New")
	h := limit(okHandler)

	// minute 2, hour 3: a's first two pass (minute binds, having least left),
	// the third is refused by minute; a minute later one passes (hour binds)
	// and the next is refused by hour.
	require.Equal(t, []int{200, 200, 429}, statuses(h, "a", "a", "a"), "a, the first minute")
	mock.Add(time.Minute)
	require.Equal(t, []int{200, 429}, statuses(h, "a", "a"), "a, the second minute")
	require.Equal(t, []int{200, 200, 200}, statuses(h, "gold-b", "gold-b", "gold-b"), "gold-b")
	require.Equal(t, []string{"minute", "minute", "minute", "hour", "hour", "minute", "minute", "minute"}, seen, "binding policies, as the test's hook saw them")

	want := `
# HELP keylimit_http_decisions_total Requests the middleware decided, by tier, binding policy and outcome (allowed, refused, untracked or error).
# TYPE keylimit_http_decisions_total counter
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="hour",tier=""} 1
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier=""} 2
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier="gold"} 3
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="hour",tier=""} 1
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="minute",tier=""} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "keylimit_http_decisions_total"), "decisions")
	require.Equal(t, map[string]uint64{"": 5, "gold": 3}, histogramCounts(t, reg, "keylimit_http_decision_seconds", "tier"), "latency observations by tier")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err, "GatherAndLint")
	require.Empty(t, problems, "what promlint finds")
}

// TestHTTPOutcomes: each outcome and the latency buckets, from decisions
// made up to the nanosecond.
func TestHTTPOutcomes(t *testing.T) {
	hm := metrics.NewHTTP("api")
	for _, d := range []quota.Decision{
		{Policy: "minute", Result: keylimit.Result{Allowed: true}, Elapsed: 800 * time.Nanosecond},
		{Policy: "minute", Result: keylimit.Result{Allowed: true}, Elapsed: time.Microsecond}, // on a bound: in its bucket
		{Policy: "minute", Result: keylimit.Result{}, Elapsed: 3 * time.Microsecond},
		{Policy: "minute", Result: keylimit.Result{Untracked: true}, Elapsed: 2 * time.Millisecond},
		{Policy: "minute", Result: keylimit.Result{Untracked: true, Allowed: true}, Elapsed: 40 * time.Millisecond},
		{Policy: "minute", Result: keylimit.Result{Err: errors.New("keylimit: no limit")}, Elapsed: time.Second},
	} {
		hm.OnDecision(nil, d)
	}
	want := `
# HELP keylimit_http_decision_seconds How long the middleware took to decide a request, by tier.
# TYPE keylimit_http_decision_seconds histogram
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="1e-06"} 2
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="2.5e-06"} 2
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="5e-06"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="1e-05"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="2.5e-05"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="5e-05"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.0001"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.00025"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.0005"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.001"} 3
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.0025"} 4
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.005"} 4
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.01"} 4
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.025"} 4
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.05"} 5
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="0.1"} 5
keylimit_http_decision_seconds_bucket{limiter="api",tier="",le="+Inf"} 6
keylimit_http_decision_seconds_sum{limiter="api",tier=""} 1.0420048
keylimit_http_decision_seconds_count{limiter="api",tier=""} 6
# HELP keylimit_http_decisions_total Requests the middleware decided, by tier, binding policy and outcome (allowed, refused, untracked or error).
# TYPE keylimit_http_decisions_total counter
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier=""} 2
keylimit_http_decisions_total{limiter="api",outcome="error",policy="minute",tier=""} 1
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="minute",tier=""} 1
keylimit_http_decisions_total{limiter="api",outcome="untracked",policy="minute",tier=""} 2
`
	require.NoError(t, testutil.CollectAndCompare(hm, strings.NewReader(want)), "the scrape")
}

// TestHTTPConcurrent: goroutines deciding under a few label sets at once,
// each set first met by several of them together; every decision is
// counted once.
func TestHTTPConcurrent(t *testing.T) {
	const goroutines, calls = 8, 1000
	hm := metrics.NewHTTP("api")
	policies := []string{"second", "minute", "hour"}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				hm.OnDecision(nil, quota.Decision{Policy: policies[i%3], Result: keylimit.Result{Allowed: g%2 == 0}})
			}
		})
	}
	wg.Wait()
	// Of each goroutine's calls, 334 are for "second", 333 for each other;
	// the even goroutines' are admitted.
	want := `
# HELP keylimit_http_decisions_total Requests the middleware decided, by tier, binding policy and outcome (allowed, refused, untracked or error).
# TYPE keylimit_http_decisions_total counter
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="hour",tier=""} 1332
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier=""} 1332
keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="second",tier=""} 1336
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="hour",tier=""} 1332
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="minute",tier=""} 1332
keylimit_http_decisions_total{limiter="api",outcome="refused",policy="second",tier=""} 1336
`
	require.NoError(t, testutil.CollectAndCompare(hm, strings.NewReader(want), "keylimit_http_decisions_total"), "decisions")
	require.Equal(t, uint64(goroutines*calls), histogramCounts(t, gatherer(hm), "keylimit_http_decision_seconds", "tier")[""], "latency observations")
}

// TestHTTPAllocs: a decision whose labels were met before allocates
// nothing.
func TestHTTPAllocs(t *testing.T) {
	hm := metrics.NewHTTP("api")
	d := quota.Decision{Tier: "gold", Policy: "minute", Result: keylimit.Result{Allowed: true}, Elapsed: time.Microsecond}
	hm.OnDecision(nil, d)
	require.Zero(t, testing.AllocsPerRun(1000, func() { hm.OnDecision(nil, d) }), "allocations of OnDecision")
}

// TestHTTPDecisionsWithoutRequest: the decisions of a quota.Decider, as a
// grpclimit server hands them to its OnDecision, count through
// OnDecision(nil, d) as the middleware's do, with no HTTP in the way, and
// allocate nothing once their labels were met.
func TestHTTPDecisionsWithoutRequest(t *testing.T) {
	mock := clock.NewMock()
	hm := metrics.NewHTTP("grpc")
	d, err := quota.New(quota.Config{Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(2), keylimit.WithClock(mock))}})
	require.NoError(t, err)
	for range 3 {
		v, err := d.Decide(context.Background(), "k", "", 1)
		require.NoError(t, err)
		hm.OnDecision(nil, v.Decision)
	}
	want := `
# HELP keylimit_http_decisions_total Requests the middleware decided, by tier, binding policy and outcome (allowed, refused, untracked or error).
# TYPE keylimit_http_decisions_total counter
keylimit_http_decisions_total{limiter="grpc",outcome="allowed",policy="minute",tier=""} 2
keylimit_http_decisions_total{limiter="grpc",outcome="refused",policy="minute",tier=""} 1
`
	require.NoError(t, testutil.CollectAndCompare(hm, strings.NewReader(want), "keylimit_http_decisions_total"))
	v, err := d.Decide(context.Background(), "k", "", 1)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(1000, func() { hm.OnDecision(nil, v.Decision) }), "allocations of OnDecision(nil, d)")
}

// TestHTTPNames: an empty name or one that is not UTF-8 fails to register,
// and its OnDecision counts nothing and does not panic; two names share a
// registry.
func TestHTTPNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewHTTP("api")), "api")
	require.NoError(t, reg.Register(metrics.NewHTTP("admin")), "admin")
	require.ErrorAs(t, reg.Register(metrics.NewHTTP("api")), new(prometheus.AlreadyRegisteredError), "api again")
	for name, want := range map[string]string{
		"":     "metrics: the name of HTTP metrics is empty",
		"\xff": `metrics: the name "\xff" of HTTP metrics is not valid UTF-8`,
	} {
		hm := metrics.NewHTTP(name)
		require.ErrorContains(t, reg.Register(hm), want, "name %q", name)
		hm.OnDecision(nil, quota.Decision{Policy: "minute"})
		ch := make(chan prometheus.Metric, 10)
		hm.Collect(ch)
		require.Zero(t, len(ch), "series of the metrics named %q", name)
	}
}
