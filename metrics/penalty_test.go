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

// TestStatsOfAPenalty: a penalty's bans and the requests refused by them,
// beside its limiter's decisions (the ban's refusals among the refused).
func TestStatsOfAPenalty(t *testing.T) {
	lim, _ := fixedWindow(t, 1, keylimit.WithStats())
	pen, err := keylimit.NewPenalty[string](lim, keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour})
	require.NoError(t, err)
	defer pen.Close()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewStats("login", pen)), "Register")
	// a: admitted, refused, refused (the ban starts), then 3 refused by the ban.
	require.Equal(t, 1, allows(pen, "a", "a", "a", "a", "a", "a"))

	want := `
# HELP keylimit_ban_refusals_total Requests a penalty refused by a ban, without asking its limiter.
# TYPE keylimit_ban_refusals_total counter
keylimit_ban_refusals_total{limiter="login"} 3
# HELP keylimit_bans_total Bans a penalty (keylimit.Penalty) started: keys refused too often, refused outright for a while.
# TYPE keylimit_bans_total counter
keylimit_bans_total{limiter="login"} 1
# HELP keylimit_decisions_total Requests the limiter decided, by outcome (allowed or refused); only from a limiter that counts them (keylimit.WithStats).
# TYPE keylimit_decisions_total counter
keylimit_decisions_total{limiter="login",outcome="allowed"} 1
keylimit_decisions_total{limiter="login",outcome="refused"} 5
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keylimit_ban_refusals_total", "keylimit_bans_total", "keylimit_decisions_total"), "the scrape")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err, "GatherAndLint")
	require.Empty(t, problems, "what promlint finds")
	// A limiter that is no penalty has no ban series.
	require.Equal(t, 5, testutil.CollectAndCount(metrics.NewStats("plain", lim)), "keys, untracked, evicted, decisions by outcome")
}
