package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourGRPC: the scene says what grpclimit does and how to run its demo,
// which the tests leave to the grpclimit module's own (TestDemo there
// checks its whole output): the mock clock skips it.
func TestTourGRPC(t *testing.T) {
	want := oneScene("gRPC both ways: grpclimit's server and client interceptors over loopback", `  The same limits for gRPC, in the grpclimit module: its server interceptors refuse a
  call with ResourceExhausted and a RetryInfo delay, and send the RateLimit fields as
  metadata; its client interceptors (grpclimit.Client) wait that delay out and pace a
  burst. A module of its own, so that this one needs no gRPC.
  See it run:
      cd grpclimit && go run ./cmd/grpc-demo
`)
	require.Equal(t, want, tourOf(t, "grpc"))
}
