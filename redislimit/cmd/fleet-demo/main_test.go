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

// TestFleetDemo runs the demo on its own redis-server and checks the
// totals it prints: 3x the limit in memory, exactly 1x for each Redis type;
// with leases, at most the bound of the limit, and at most one script call
// per 20 events admitted. Without redis-server the test fails and says how
// to install it.
func TestFleetDemo(t *testing.T) {
	require.True(t, redisserver.Installed(), "the fleet demo needs redis-server, and "+redisserver.InstallHint)
	var out bytes.Buffer
	require.NoError(t, run(&out))
	got := out.String()
	for _, want := range []string{
		"in-memory TokenBucket", "in-memory FixedWindow", "in-memory SlidingWindow",
		"redislimit TokenBucket", "redislimit FixedWindow", "redislimit SlidingWindow",
		"An admitted call took",
	} {
		require.Contains(t, got, want)
	}
	require.Equal(t, 3, strings.Count(got, "   10  1x the limit"), "rows that admit exactly 10 (1x), want the 3 Redis ones:\n%s", got)
	require.Equal(t, 3, strings.Count(got, "   30  3x the limit"), "rows that admit 30 (3x), want the 3 in-memory ones:\n%s", got)

	m := regexp.MustCompile(`admitted (\d+) of at most (\d+) .*\n.*with (\d+) Redis script calls`).FindStringSubmatch(got)
	require.NotNil(t, m, "the leases scene's figures:\n%s", got)
	admitted, bound, calls := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	require.LessOrEqual(t, admitted, bound, "events the fleet admitted with leases")
	require.LessOrEqual(t, 20*calls, admitted, "script calls for %d admitted", admitted)
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
