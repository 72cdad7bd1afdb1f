package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// A server that is down: every call ends with Unavailable. With Throttle 2
// the Client sends a call with probability 1 − (calls − 2 × accepts) /
// (calls + 1) over its recent calls: the first for sure, then fewer and
// fewer. Of 1,000 calls in one instant it sends a handful (about
// ln 1,000, 7), and ends the rest at once, unsent, with ErrThrottled and
// the status Unavailable.
func ExampleClient_throttle() {
	var reached atomic.Int32
	down := grpc.ChainUnaryInterceptor(func(context.Context, any, *grpc.UnaryServerInfo, grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return nil, status.Error(codes.Unavailable, "down for maintenance")
	})
	pace := &grpclimit.Client{
		Throttle: 2,
		Clock:    clock.NewMock(), // time stands still: the counts do not decay
	}
	client, stop := exampleHealth([]grpc.ServerOption{down}, grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()))
	defer stop()

	throttled := 0
	var last error
	for range 1000 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if errors.Is(err, grpclimit.ErrThrottled) {
			throttled, last = throttled+1, err
		}
	}
	fmt.Println("sent fewer than 50:", reached.Load() < 50, "; sent and throttled:", int(reached.Load())+throttled)
	fmt.Println(status.Code(last))
	fmt.Println(strings.SplitAfter(last.Error(), "throttled locally")[0])
	// Output:
	// sent fewer than 50: true ; sent and throttled: 1000
	// Unavailable
	// grpclimit: not calling /grpc.health.v1.Health/Check under "passthrough:///bufnet": grpclimit: throttled locally
}
