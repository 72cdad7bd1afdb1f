package metrics_test

import (
	"strings"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// An adaptive.Limiter's overall limit is a gauge and its sheds a counter by
// criticality, never by key; a Concurrency's limit is the gauge alone, and
// a rate limiter has neither.
func TestStatsAdaptive(t *testing.T) {
	a, err := adaptive.New[string](adaptive.AIMD(4, 8)) // starts at its floor, 4
	require.NoError(t, err)
	defer a.Close()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("backend", a)))
	var held []keylimit.Permit
	// Four keys fill the limit; a's second slot is within its fair share (4
	// over 4 keys, and one more while others hold slots: 2); its third is
	// over the limit and over its share: shed.
	for _, key := range []string{"a", "b", "c", "d", "a", "a"} {
		p, _ := a.TryAcquire(key, 1)
		held = append(held, p)
	}
	defer func() {
		for _, p := range held {
			p.Release()
		}
	}()
	want := `
# HELP keylimit_limit The limit now: an adaptive limiter's overall limit (adaptive.Limiter), which moves, or a concurrency limiter's.
# TYPE keylimit_limit gauge
keylimit_limit{limiter="backend"} 4
# HELP keylimit_shed_total Requests an adaptive limiter shed, by criticality (critical, default or sheddable).
# TYPE keylimit_shed_total counter
keylimit_shed_total{criticality="critical",limiter="backend"} 0
keylimit_shed_total{criticality="default",limiter="backend"} 1
keylimit_shed_total{criticality="sheddable",limiter="backend"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "keylimit_limit", "keylimit_shed_total"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	c, err := keylimit.NewConcurrency[string](3)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, testutil.GatherAndCompare(gatherer(metrics.NewStats("inflight", c)), strings.NewReader(`
# HELP keylimit_limit The limit now: an adaptive limiter's overall limit (adaptive.Limiter), which moves, or a concurrency limiter's.
# TYPE keylimit_limit gauge
keylimit_limit{limiter="inflight"} 3
`), "keylimit_limit", "keylimit_shed_total"))
	lim, _ := fixedWindow(t, 1)
	require.Equal(t, 3, testutil.CollectAndCount(metrics.NewStats("api", lim)), "a rate limiter: keys, untracked, evicted")
}
