package grpclimit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A call an adaptive policy sheds ends Unavailable, with RetryInfo and
// grpc-retry-pushback-ms in a Trailers-Only answer; a critical call (from
// Config.Criticality) uses the reserve above the limit; a call that ends
// gives its slot back.
func TestAdaptivePolicyShedsUnavailable(t *testing.T) {
	a, err := adaptive.New[string](adaptive.AIMD(1, 2), keylimit.WithClock(newMock())) // limit 1, critical 2
	require.NoError(t, err)
	defer a.Close()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "capacity", Concurrency: a}},
		Criticality: func(ctx context.Context, _ string) keylimit.Criticality {
			if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-priority")) > 0 {
				return keylimit.Critical
			}
			return keylimit.Default
		},
	})
	b := start(t, setup{server: limitedBy(srv)})
	require.NoError(t, b.check(context.Background(), "x-api-key", "a").err)

	held, r := a.TryAcquire("a", 1) // another call of the key, in flight
	require.True(t, r.Allowed)
	shed := b.check(context.Background(), "x-api-key", "a")
	require.Equal(t, codes.Unavailable, shed.code())
	require.Equal(t, `grpclimit: policy "capacity" is shedding load: the server is short of capacity, retry in 1s`, status.Convert(shed.err).Message())
	delay, ok := grpclimit.RetryDelay(shed.err)
	require.True(t, ok)
	require.Positive(t, delay)
	require.Equal(t, []string{"1000"}, shed.trailer.Get("grpc-retry-pushback-ms"))
	require.Empty(t, shed.header, "Trailers-Only")
	require.Equal(t, [3]uint64{1, 0, 0}, a.Stats().Shed)
	require.NoError(t, b.check(context.Background(), "x-api-key", "a", "x-priority", "critical").err, "a critical call has a reserve")

	held.Release()
	require.NoError(t, b.check(context.Background(), "x-api-key", "a").err)
	require.Equal(t, 1, a.Peek("a").Remaining, "the call gave its slot back")
}

// grpc-go's own retry policy, retrying UNAVAILABLE, retries a shed call
// after the server's pushback (1 s), not sooner, because the shed answer is
// Trailers-Only: over 127.0.0.1, the first attempt is shed while another
// call of the key holds the only slot, the slot is freed 100 ms later, and
// the one retry grpc-go makes passes.
func TestGRPCRetryPolicyObeysShedPushback(t *testing.T) {
	a, err := adaptive.New[string](adaptive.AIMD(1, 2), keylimit.WithClock(newMock())) // limit 1
	require.NoError(t, err)
	defer a.Close()
	var mu sync.Mutex
	var times []time.Time
	var ds []quota.Decision
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Method,
		Policies: []quota.Policy{{Name: "capacity", Concurrency: a}},
		OnDecision: func(_ context.Context, _ string, d quota.Decision) {
			mu.Lock()
			defer mu.Unlock()
			times, ds = append(times, time.Now()), append(ds, d)
		},
	})
	b := start(t, setup{
		tcp:    true,
		server: limitedBy(srv),
		client: []grpc.DialOption{grpc.WithDefaultServiceConfig(strings.Replace(retryPolicy, "RESOURCE_EXHAUSTED", "UNAVAILABLE", 1))},
	})
	held, r := a.TryAcquire("/grpc.health.v1.Health/Check", 1)
	require.True(t, r.Allowed)
	time.AfterFunc(100*ms, held.Release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*s)
	defer cancel()
	_, err = b.health.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "shed, then retried by grpc-go after the pushback")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ds, 2, "attempts: the shed one and grpc-go's retry")
	require.True(t, ds[0].Shed)
	require.True(t, ds[1].Result.Allowed)
	require.GreaterOrEqual(t, times[1].Sub(times[0]), time.Second, "the retry came no sooner than the pushback")
}
