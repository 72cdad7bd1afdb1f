package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestStatsExactCounts: a known sequence of decisions on a FixedWindow made
// with WithStats, scraped from a real registry, series by series.
func TestStatsExactCounts(t *testing.T) {
	lim, mock := fixedWindow(t, 3, keylimit.WithStats(), keylimit.WithMaxKeys(2))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("login", lim)), "Register")

	require.Equal(t, 3, allows(lim, "a", "a", "a", "a"), "a: 3 of 4 admitted")
	require.Equal(t, 1, allows(lim, "b"), "b admitted")
	require.Equal(t, 0, allows(lim, "c"), "c: over the key cap, refused untracked")
	mock.Add(time.Hour) // a and b idle: c's arrival at the cap sweeps both out
	require.Equal(t, 1, allows(lim, "c"), "c admitted")
	require.Equal(t, keylimit.Stats{Decisions: true, Keys: 1, Admitted: 5, Refused: 2, Untracked: 1, Evicted: 2}, lim.Stats(), "the limiter's own Stats")

	want := `
# HELP keylimit_decisions_total Requests the limiter decided, by outcome (allowed or refused); only from a limiter that counts them (keylimit.WithStats).
# TYPE keylimit_decisions_total counter
keylimit_decisions_total{limiter="login",outcome="allowed"} 5
keylimit_decisions_total{limiter="login",outcome="refused"} 2
# HELP keylimit_evicted_total Idle keys the limiter forgot.
# TYPE keylimit_evicted_total counter
keylimit_evicted_total{limiter="login"} 2
# HELP keylimit_keys Keys the limiter tracks now.
# TYPE keylimit_keys gauge
keylimit_keys{limiter="login"} 1
# HELP keylimit_untracked_total Requests for keys the key cap left untracked (keylimit.WithMaxKeys).
# TYPE keylimit_untracked_total counter
keylimit_untracked_total{limiter="login"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)), "the scrape")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err, "GatherAndLint")
	require.Empty(t, problems, "what promlint finds")
}

// TestStatsWithoutWithStats: a limiter that does not count decisions shows
// no decision counters (its 0 is no count); keys, untracked and evicted are
// there, counted as always.
func TestStatsWithoutWithStats(t *testing.T) {
	lim, _ := fixedWindow(t, 1, keylimit.WithMaxKeys(1))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("api", lim)), "Register")
	require.Equal(t, 1, allows(lim, "a", "a", "b"), "a admitted once; b untracked")

	want := `
# HELP keylimit_keys Keys the limiter tracks now.
# TYPE keylimit_keys gauge
keylimit_keys{limiter="api"} 1
# HELP keylimit_untracked_total Requests for keys the key cap left untracked (keylimit.WithMaxKeys).
# TYPE keylimit_untracked_total counter
keylimit_untracked_total{limiter="api"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keylimit_keys", "keylimit_untracked_total", "keylimit_decisions_total"), "the scrape")
	require.Equal(t, 3, testutil.CollectAndCount(metrics.NewStats("api", lim)), "series: keys, untracked, evicted")
}

// TestStatsRemoteStore: the store counters of a limiter that counts them
// (redislimit's), each under its own name, and no keys, untracked or
// evicted, which such a limiter does not count; an in-memory limiter has no
// store counters.
func TestStatsRemoteStore(t *testing.T) {
	src := &fixedStats{st: keylimit.Stats{Decisions: true, Remote: true, Admitted: 9, Refused: 4, Calls: 11, Errors: 3, ScriptErrors: 1, Fallbacks: 2, CacheHits: 5}}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("fleet", src)), "Register")

	want := `
# HELP keylimit_store_cache_hits_total Refusals answered from the local deny cache, without a round trip.
# TYPE keylimit_store_cache_hits_total counter
keylimit_store_cache_hits_total{limiter="fleet"} 5
# HELP keylimit_store_calls_total Round trips to the remote store.
# TYPE keylimit_store_calls_total counter
keylimit_store_calls_total{limiter="fleet"} 11
# HELP keylimit_store_errors_total Round trips to the remote store that failed.
# TYPE keylimit_store_errors_total counter
keylimit_store_errors_total{limiter="fleet"} 3
# HELP keylimit_store_fallbacks_total Decisions made by the failure policy instead of the remote store.
# TYPE keylimit_store_fallbacks_total counter
keylimit_store_fallbacks_total{limiter="fleet"} 2
# HELP keylimit_store_script_errors_total Round trips whose script failed on the remote store (a bug or an incompatibility, not an outage; not in store_errors_total).
# TYPE keylimit_store_script_errors_total counter
keylimit_store_script_errors_total{limiter="fleet"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keylimit_store_calls_total", "keylimit_store_errors_total", "keylimit_store_fallbacks_total", "keylimit_store_cache_hits_total",
		"keylimit_store_script_errors_total"), "the scrape")
	require.Equal(t, 7, testutil.CollectAndCount(metrics.NewStats("fleet", src)), "series: 2 decisions, 5 store")

	lim, _ := fixedWindow(t, 1, keylimit.WithStats())
	allows(lim, "a", "a")
	require.Equal(t, 0, testutil.CollectAndCount(metrics.NewStats("memory", lim), "keylimit_store_calls_total"), "an in-memory limiter's store calls")
}

// TestStatsReadOnScrape: the collector reads Stats once per scrape and at
// no other time: not when registered, not between scrapes.
func TestStatsReadOnScrape(t *testing.T) {
	src := &fixedStats{st: keylimit.Stats{Keys: 7}}
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("api", src)), "Register")
	require.Equal(t, int64(0), src.calls.Load(), "Stats calls after Register")
	for i := range 3 {
		_, err := reg.Gather()
		require.NoError(t, err, "Gather")
		require.Equal(t, int64(i+1), src.calls.Load(), "Stats calls after scrape %d", i+1)
	}
}

// TestStatsNames: limiters under different names share one registry; a
// name used twice, an empty name and a nil limiter fail to register, with
// the reason.
func TestStatsNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	login, api := &fixedStats{st: keylimit.Stats{Keys: 2}}, &fixedStats{st: keylimit.Stats{Keys: 3}}
	require.NoError(t, reg.Register(metrics.NewStats("login", login)), "login")
	require.NoError(t, reg.Register(metrics.NewStats("api", api)), "api")
	want := `
# HELP keylimit_keys Keys the limiter tracks now.
# TYPE keylimit_keys gauge
keylimit_keys{limiter="api"} 3
keylimit_keys{limiter="login"} 2
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "keylimit_keys"), "the scrape")

	err := reg.Register(metrics.NewStats("login", api))
	require.ErrorAs(t, err, new(prometheus.AlreadyRegisteredError), "login again")

	err = reg.Register(metrics.NewStats("", api))
	require.ErrorContains(t, err, "metrics: the name of a limiter's stats is empty", "an empty name")
	err = reg.Register(metrics.NewStats("nil", nil))
	require.ErrorContains(t, err, `metrics: the limiter of stats "nil" is nil`, "a nil limiter")
	err = reg.Register(metrics.NewStats("\xff", api))
	require.ErrorContains(t, err, `metrics: the name "\xff" of a limiter's stats is not valid UTF-8`, "a name that is not UTF-8")
}
