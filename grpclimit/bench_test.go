package grpclimit_test

import (
	"context"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// never is a limit no benchmark reaches: every call is admitted.
var never = keylimit.PerSecond(1_000_000_000)

// BenchmarkUnary is one Check call over bufconn, unlimited beside limited
// by the server interceptors (admitted), and paced by a Client as well:
// read the cost of the interceptors as the ratio to "bare" in one run.
func BenchmarkUnary(b *testing.B) {
	srv := newServer(b, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []grpclimit.Policy{{Name: "second", Limiter: newBucket(b, never, clock.New())}},
	})
	pace := &grpclimit.Client{Limiter: newBucket(b, never, clock.New())}
	for _, bc := range []struct {
		name  string
		setup setup
	}{
		{"bare", setup{}},
		{"server", setup{server: limitedBy(srv)}},
		{"server+client", setup{server: limitedBy(srv), client: pacedBy(pace)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be := start(b, bc.setup)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
			req := &healthpb.HealthCheckRequest{}
			if _, err := be.health.Check(ctx, req); err != nil {
				b.Fatal(err) // the connection is up before the timer starts
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := be.health.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInterceptor is the server interceptor alone, called without a
// network, beside the bare handler it wraps: admitted, and refused.
func BenchmarkInterceptor(b *testing.B) {
	mock := clock.NewMock()
	srv := newServer(b, grpclimit.Config{
		Key: grpclimit.Metadata("x-api-key"),
		Policies: []grpclimit.Policy{
			{Name: "open", Limiter: newBucket(b, never, mock)},
			{Name: "shut", Limiter: newBucket(b, keylimit.PerHour(1), mock)},
		},
	})
	open := newServer(b, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []grpclimit.Policy{{Name: "open", Limiter: newBucket(b, never, mock)}},
	})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, discardStream{})
	srv.UnaryInterceptor()(ctx, nil, info, handler) // "shut" is empty from now on
	for _, bc := range []struct {
		name string
		call func() (any, error)
	}{
		{"bare", func() (any, error) { return handler(ctx, nil) }},
		{"admitted", func() (any, error) { return open.UnaryInterceptor()(ctx, nil, info, handler) }},
		{"refused", func() (any, error) { return srv.UnaryInterceptor()(ctx, nil, info, handler) }},
	} {
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
