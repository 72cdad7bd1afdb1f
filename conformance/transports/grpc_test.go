package transports_test

import (
	"context"
	"net"
	"testing"

	"github.com/keylimit/keylimit/conformance"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// overGRPC sends the requests of s as calls to a gRPC health service on
// 127.0.0.1 behind grpclimit's interceptors (the key and the op in
// metadata) and checks each answer. An admitted call's fields are header
// metadata, and its trailer has none; a refused call's are trailer
// metadata, beside grpc-retry-pushback-ms, and it has no header
// (Trailers-Only).
func overGRPC(t *testing.T, s conformance.Scenario) []answer {
	mock, policies, tiers := build(t, s)
	c := grpclimit.Config{
		Key:      grpclimit.Metadata("x-key"),
		Policies: policies,
		Tiers:    tiers,
		DryRun:   s.DryRun,
	}
	if s.Tier != nil {
		c.Tier = func(_ context.Context, _, key string) string { return s.Tier(key) }
	}
	if s.Cost != nil {
		c.Cost = func(ctx context.Context, _ string) int {
			return s.Cost(metadata.ValueFromIncomingContext(ctx, "x-op")[0])
		}
	}
	limits, err := grpclimit.NewServer(c)
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limits.UnaryInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)

	var out []answer
	for i, req := range s.Requests() {
		mock.Add(req.Step)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-key", req.Key, "x-op", req.Op)
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		a := answer{}
		fields := header
		switch status.Code(err) {
		case codes.OK:
			a.Outcome = "admitted"
			require.Empty(t, trailer.Get("ratelimit"), "request %d: an admitted call's trailer", i)
		case codes.ResourceExhausted, codes.Unavailable:
			a.Outcome = map[codes.Code]string{codes.ResourceExhausted: "refused", codes.Unavailable: "unavailable"}[status.Code(err)]
			require.Empty(t, header, "request %d: a refusal sends no header (Trailers-Only)", i)
			require.Len(t, trailer.Get("grpc-retry-pushback-ms"), 1, "request %d: the pushback", i)
			fields = trailer
		default:
			t.Fatalf("request %d %+v: %v", i, req, err)
		}
		a.Fields = conformance.Fields{
			RateLimit:       fields.Get("ratelimit"),
			RateLimitPolicy: fields.Get("ratelimit-policy"),
			RetryAfter:      fields.Get("retry-after"),
		}
		_, err = s.Check(req, a.Fields, a.Outcome != "admitted" && req.Op != "/huge")
		require.NoError(t, err, "request %d %+v (%s)", i, req, a.Outcome)
		out = append(out, a)
	}
	return out
}
