package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/keylimit/keylimit/internal/redisserver"
)

// TestFleetDemo runs the demo on its own redis-server and checks the
// totals it prints: 3x the limit in memory, exactly 1x for each Redis type.
// Without redis-server the test fails and says how to install it.
func TestFleetDemo(t *testing.T) {
	if !redisserver.Installed() {
		t.Fatal("the fleet demo needs redis-server, and " + redisserver.InstallHint)
	}
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"in-memory TokenBucket", "in-memory FixedWindow", "in-memory SlidingWindow",
		"redislimit TokenBucket", "redislimit FixedWindow", "redislimit SlidingWindow",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "   10  1x the limit"); n != 3 {
		t.Errorf("%d rows admit exactly 10 (1x), want the 3 Redis ones:\n%s", n, got)
	}
	if n := strings.Count(got, "   30  3x the limit"); n != 3 {
		t.Errorf("%d rows admit 30 (3x), want the 3 in-memory ones:\n%s", n, got)
	}
}
