package metrics_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/keylimit/keylimit/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A server limits / to 2 requests a minute per client IP and serves
// /metrics beside it, unlimited. After 3 requests from one client, a scrape
// of its own /metrics shows what the limiter counted (NewStats) and what
// the middleware decided (NewHTTP; the latency histogram's buckets and sum
// are left out here, as they depend on the machine).
func Example() {
	perMinute, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(2),
		keylimit.WithStats(), // count decisions, for keylimit_decisions_total
		keylimit.WithClock(clock.NewMock()))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	api := metrics.NewHTTP("api")
	reg.MustRegister(metrics.NewStats("api", perMinute), api)

	limit, err := httplimit.New(httplimit.Config{
		Key:        httplimit.ClientIP{}.Key,
		Policies:   []quota.Policy{{Name: "minute", Limiter: perMinute}},
		OnDecision: api.OnDecision,
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	printMetrics(srv.URL + "/metrics")
	// Output:
	// 200 OK
	// 200 OK
	// 429 Too Many Requests
	// keylimit_decisions_total{limiter="api",outcome="allowed"} 2
	// keylimit_decisions_total{limiter="api",outcome="refused"} 1
	// keylimit_evicted_total{limiter="api"} 0
	// keylimit_http_decision_seconds_count{limiter="api",tier=""} 3
	// keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier=""} 2
	// keylimit_http_decisions_total{limiter="api",outcome="refused",policy="minute",tier=""} 1
	// keylimit_keys{limiter="api"} 1
	// keylimit_untracked_total{limiter="api"} 0
}

// printMetrics scrapes url and prints its keylimit series, without the
// HELP and TYPE lines, nor the buckets and sums of histograms.
func printMetrics(url string) {
	resp, err := http.Get(url)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "keylimit_") && !strings.Contains(line, "_bucket{") && !strings.Contains(line, "_sum{") {
			fmt.Println(line)
		}
	}
}
