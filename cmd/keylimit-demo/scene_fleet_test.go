package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourFleet: three in-memory instances admit three times the limit, and
// the scene says how to run the Redis fleet demo (which the tests leave to
// its module's own: the mock clock skips it).
func TestTourFleet(t *testing.T) {
	want := oneScene("A fleet of three instances: in-memory limits add up, Redis keeps one", `  limit 10/hour per user; alice's 30 requests spread over 3 instances,
  each with an in-memory bucket: 30 admitted, 3x the limit.
  With redislimit the fleet shares one count in Redis and admits 10. See it:
      `+fleetRunCommand+`
`)
	require.Equal(t, want, tourOf(t, "fleet"))
}
