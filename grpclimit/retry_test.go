package grpclimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// retryPolicy is a service config whose retry policy retries
// RESOURCE_EXHAUSTED on the health service at most once, after a backoff
// of at most 1 ms: a retry that did not wait for the server's pushback
// would meet the same empty bucket and fail the call.
const retryPolicy = `{"methodConfig": [{
	"name": [{"service": "grpc.health.v1.Health"}],
	"retryPolicy": {
		"maxAttempts": 2,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.001s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	}
}]}`

// Issue 23: grpc-go's own retry policy retries a refused call after the
// server's pushback, because the refusal is Trailers-Only. With a bucket of
// one call per 300 ms on a real clock, over 127.0.0.1: the second call is
// refused, retried by grpc-go once, no sooner than the pushback the server
// sent, and passes; the server decided three attempts. Before, the refusal
// carried header metadata, grpc-go never retried it (one attempt), and the
// call failed with ResourceExhausted. The same for a stream (Watch), which
// grpc-go retries before its first message.
func TestGRPCRetryPolicyObeysPushback(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "unary", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			// Every attempt that reaches the server is decided: when, and
			// what the decision was.
			var mu sync.Mutex
			var times []time.Time
			var ds []quota.Decision
			srv := newServer(t, grpclimit.Config{
				Key:      grpclimit.Method,
				Policies: []quota.Policy{{Name: "p", Limiter: newBucket(t, keylimit.Per(1, 300*ms), clock.New())}},
				OnDecision: func(_ context.Context, _ string, d quota.Decision) {
					mu.Lock()
					defer mu.Unlock()
					times, ds = append(times, time.Now()), append(ds, d)
				},
			})
			b := start(t, setup{
				tcp:    true,
				server: limitedBy(srv),
				client: []grpc.DialOption{grpc.WithDefaultServiceConfig(retryPolicy)},
			})
			call := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*s)
				defer cancel()
				if !stream {
					_, err := b.health.Check(ctx, &healthpb.HealthCheckRequest{})
					return err
				}
				w, err := b.health.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					_, err = w.Recv()
				}
				return err
			}
			require.NoError(t, call(), "the first call")
			err := call()
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, ds, 3, "attempts: one for the first call, two for the second")
			require.NoError(t, err, "the second call, refused, then retried by grpc-go")
			require.Equal(t, []bool{true, false, true}, []bool{ds[0].Result.Allowed, ds[1].Result.Allowed, ds[2].Result.Allowed})
			pushback := ds[1].Result.RetryAfter.Truncate(ms) // the server sent it rounded up to a ms
			require.Positive(t, pushback)
			spacing := times[2].Sub(times[1])
			require.GreaterOrEqual(t, spacing, pushback, "the retry came no sooner than the pushback")
			t.Logf("pushback %v, retried %v after the refused attempt", ds[1].Result.RetryAfter.Round(ms), spacing.Round(ms))
		})
	}
}
