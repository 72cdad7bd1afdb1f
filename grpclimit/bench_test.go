package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// never is a limit no benchmark reaches: every call is admitted.
var never = keylimit.PerSecond(1_000_000_000)

// BenchmarkUnary makes Check calls over bufconn to three backends in turn:
// unlimited ("bare"), limited by the server interceptors (every call
// admitted), and limited and paced by a Client as well. Each iteration calls
// all three, in an order that rotates, and times each call, so that a change
// in the machine's load falls on all three alike: read the reported ratios
// to bare, not ns/op, which is the three calls together.
func BenchmarkUnary(b *testing.B) {
	srv := newServer(b, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "second", Limiter: newBucket(b, never, clock.New())}},
	})
	pace := &grpclimit.Client{Limiter: newBucket(b, never, clock.New())}
	backends := []*backend{
		start(b, setup{}),
		start(b, setup{server: limitedBy(srv)}),
		start(b, setup{server: limitedBy(srv), client: pacedBy(pace)}),
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	req := &healthpb.HealthCheckRequest{}
	call := func(be *backend) {
		if _, err := be.health.Check(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	for _, be := range backends {
		call(be) // every connection is up before the timer starts
	}
	var spent [3]time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for j := range backends {
			k := (i + j) % len(backends)
			t0 := time.Now()
			call(backends[k])
			spent[k] += time.Since(t0)
		}
		i++
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(i), "bare-ns/call")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "server/bare")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "server+client/bare")
}

// interceptorCalls are the calls BenchmarkInterceptor measures: the bare
// handler, and the server interceptor around it, admitting and refusing,
// without a network.
func interceptorCalls(tb testing.TB) []struct {
	name string
	call func() (any, error)
} {
	mock := clock.NewMock()
	srv := newServer(tb, grpclimit.Config{
		Key: grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{
			{Name: "open", Limiter: newBucket(tb, never, mock)},
			{Name: "shut", Limiter: newBucket(tb, keylimit.PerHour(1), mock)},
		},
	})
	open := newServer(tb, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "open", Limiter: newBucket(tb, never, mock)}},
	})
	quiet := newServer(tb, grpclimit.Config{
		Key:             grpclimit.Metadata("x-api-key"),
		Policies:        []quota.Policy{{Name: "open", Limiter: newBucket(tb, never, mock)}},
		FieldsOnRefusal: true,
	})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, discardStream{})
	srv.UnaryInterceptor()(ctx, nil, info, handler) // "shut" is empty from now on
	return []struct {
		name string
		call func() (any, error)
	}{
		{"bare", func() (any, error) { return handler(ctx, nil) }},
		{"admitted", func() (any, error) { return open.UnaryInterceptor()(ctx, nil, info, handler) }},
		{"refused", func() (any, error) { return srv.UnaryInterceptor()(ctx, nil, info, handler) }},
		{"fields-on-refusal", func() (any, error) { return quiet.UnaryInterceptor()(ctx, nil, info, handler) }},
	}
}

// TestInterceptorAllocs pins the allocations of a call through the server
// interceptor:
//
//   - admitted, 5: the copy of the key's metadata values
//     (metadata.ValueFromIncomingContext's), the RateLimit value, the array
//     of the two fields' values, and the metadata map (its table too);
//   - refused, 17: the same 5, but the array has room for retry-after and
//     grpc-retry-pushback-ms; the status message and the pushback value,
//     one string; and 11 of grpc and protobuf's to make the status and its
//     RetryInfo detail (status.New, WithDetails' copy of the status and the
//     Any it marshals the detail into, durationpb.New, Status.Err);
//   - admitted with FieldsOnRefusal, 1: the copy of the key's values.
func TestInterceptorAllocs(t *testing.T) {
	want := map[string]float64{"bare": 0, "admitted": 5, "refused": 17, "fields-on-refusal": 1}
	for _, c := range interceptorCalls(t) {
		require.Equal(t, want[c.name], testing.AllocsPerRun(1000, func() { c.call() }), c.name)
	}
}

// BenchmarkInterceptor is the server interceptor alone, called without a
// network, beside the bare handler it wraps: admitted, and refused.
func BenchmarkInterceptor(b *testing.B) {
	for _, bc := range interceptorCalls(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.call()
			}
		})
	}
}

// discardStream is the server stream of a call without a network: it takes
// the metadata set on it and sends nothing.
type discardStream struct{}

func (discardStream) Method() string               { return checkMethod }
func (discardStream) SetHeader(metadata.MD) error  { return nil }
func (discardStream) SendHeader(metadata.MD) error { return nil }
func (discardStream) SetTrailer(metadata.MD) error { return nil }
