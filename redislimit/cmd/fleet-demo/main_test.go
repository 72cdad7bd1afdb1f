package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/stretchr/testify/require"
)

// TestFleetDemo runs the demo on its own redis-server, then on the embedded
// Redis (miniredis), and checks the totals each prints: 3x the limit in
// memory, exactly 1x for each Redis type, the same on both; with leases,
// at most the bound of the limit, and at most one script call per 20
// events admitted. Without redis-server the test fails and says how to
// install it: the demo's real Redis is tested on a real one.
func TestFleetDemo(t *testing.T) {
	require.True(t, redisserver.Installed(), "the fleet demo's test needs redis-server, and "+redisserver.InstallHint)
	totals := map[string]map[string]int{}
	for _, which := range []string{"server", "embedded"} {
		var out bytes.Buffer
		require.NoError(t, run(&out, which), which)
		got := out.String()
		intro := map[string]string{"server": "redis-server started on 127.0.0.1:", "embedded": "-redis=embedded: an embedded Redis runs in this process, on 127.0.0.1:"}[which]
		require.True(t, strings.HasPrefix(got, intro), "%s: says which Redis:\n%s", which, got)
		totals[which] = fleetTotals(t, got)
		require.Equal(t, map[string]int{
			"in-memory TokenBucket": 30, "in-memory FixedWindow": 30, "in-memory SlidingWindow": 30,
			"redislimit TokenBucket": 10, "redislimit FixedWindow": 10, "redislimit SlidingWindow": 10,
		}, totals[which], "%s:\n%s", which, got)
		require.Contains(t, got, "An admitted call took", which)

		m := regexp.MustCompile(`admitted (\d+) of at most (\d+) .*\n.*with (\d+) Redis script calls`).FindStringSubmatch(got)
		require.NotNil(t, m, "%s: the leases scene's figures:\n%s", which, got)
		admitted, bound, calls := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
		require.LessOrEqual(t, admitted, bound, "%s: events the fleet admitted with leases", which)
		require.LessOrEqual(t, 20*calls, admitted, "%s: script calls for %d admitted", which, admitted)
	}
	require.Equal(t, totals["server"], totals["embedded"], "the embedded Redis admits what redis-server does")
}

// fleetTotals returns the fleet column of the demo's table, by row.
func fleetTotals(t *testing.T, out string) map[string]int {
	rows := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^((?:in-memory|redislimit) \w+) +\d+ +\d+ +\d+ +(\d+)  \d+(?:\.\d)?x the limit$`).FindAllStringSubmatch(out, -1) {
		rows[m[1]] = atoi(t, m[2])
	}
	return rows
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
