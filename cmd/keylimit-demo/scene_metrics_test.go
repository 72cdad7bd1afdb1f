package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourMetrics: the scene says what the metrics module exports and how
// to run its demo, which the tests leave to the metrics module's own
// (TestDemo there checks its whole output): the mock clock skips it.
func TestTourMetrics(t *testing.T) {
	want := oneScene("What operators see: the limits' Prometheus series at /metrics", `  The metrics module exports to Prometheus what the limits decided: httplimit's decisions
  by policy and outcome, and how long they took, from its hook; each limiter's keys from
  its Stats. A module of its own, so that this one needs no Prometheus client.
  See it run:
      cd metrics && go run ./cmd/metrics-demo
`)
	require.Equal(t, want, tourOf(t, "metrics"))
}
