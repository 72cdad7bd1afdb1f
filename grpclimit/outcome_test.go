package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A call charged by its code: Unauthenticated calls count, others are
// given back when they end; unary and stream alike; a handler reports a
// cost with quota.ReportCost and its context (a stream's Context too); a
// handler that panics is charged as Unknown.
func TestChargeByCode(t *testing.T) {
	mock := newMock()
	failed := newBucket(t, keylimit.PerHour(10), mock)
	var seen []quota.Outcome
	srv := newServer(t, grpclimit.Config{
		Key:  grpclimit.Metadata("x-api-key"),
		Cost: func(context.Context, string) int { return 2 },
		Policies: []quota.Policy{{Name: "failed", Limiter: failed, Charge: func(o quota.Outcome) int {
			seen = append(seen, o)
			if o.Status == int(codes.Unauthenticated) {
				return chargeReported(o)
			}
			return 0
		}}},
	})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k"))
	unary := func(err error, report int) {
		srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
			func(ctx context.Context, _ any) (any, error) {
				if report >= 0 {
					require.True(t, quota.ReportCost(ctx, report))
				}
				return nil, err
			})
	}
	stream := func(err error, report int) {
		srv.StreamInterceptor()(nil, &serverStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: watchMethod},
			func(_ any, ss grpc.ServerStream) error {
				if report >= 0 {
					require.True(t, quota.ReportCost(ss.Context(), report))
				}
				return err
			})
	}
	denied := status.Error(codes.Unauthenticated, "no")
	unary(nil, -1)
	require.Equal(t, 10, failed.Peek("k").Remaining, "OK: free")
	unary(denied, -1)
	require.Equal(t, 8, failed.Peek("k").Remaining, "Unauthenticated: the cost, 2")
	unary(denied, 1)
	require.Equal(t, 7, failed.Peek("k").Remaining, "Unauthenticated, reporting 1")
	stream(status.Error(codes.NotFound, "no"), -1)
	require.Equal(t, 7, failed.Peek("k").Remaining, "NotFound: free")
	stream(denied, -1)
	require.Equal(t, 5, failed.Peek("k").Remaining, "a stream's Unauthenticated")
	stream(denied, 0)
	require.Equal(t, 5, failed.Peek("k").Remaining, "reporting 0")
	func() {
		defer func() { require.Equal(t, "bug", recover()) }()
		srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
			func(context.Context, any) (any, error) { panic("bug") })
	}()
	require.Equal(t, 5, failed.Peek("k").Remaining, "a panic: Unknown, free here")
	require.Equal(t, []quota.Outcome{
		{Status: 0, Cost: 2, Reported: -1},
		{Status: int(codes.Unauthenticated), Cost: 2, Reported: -1},
		{Status: int(codes.Unauthenticated), Cost: 2, Reported: 1},
		{Status: int(codes.NotFound), Cost: 2, Reported: -1},
		{Status: int(codes.Unauthenticated), Cost: 2, Reported: -1},
		{Status: int(codes.Unauthenticated), Cost: 2, Reported: 0},
		{Status: int(codes.Unknown), Cost: 2, Reported: -1, Panicked: true},
	}, seen)
}

// Over a connection: 6 OK calls, then 12 calls failing Unauthenticated
// (by an interceptor after the limiter's) against 5 failures an hour: the
// OK calls are free, 5 of the others fail, and 7 are refused.
func TestChargeByCodeEndToEnd(t *testing.T) {
	mock := newMock()
	failed := newBucket(t, keylimit.PerHour(5), mock)
	srv := newServer(t, grpclimit.Config{
		Key: grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "failed", Limiter: failed, Charge: func(o quota.Outcome) int {
			if o.Status == int(codes.Unauthenticated) {
				return o.Cost
			}
			return 0
		}}},
	})
	deny := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get("x-password")) == 0 {
			return nil, status.Error(codes.Unauthenticated, "who are you")
		}
		return h(ctx, req)
	})
	b := start(t, setup{server: append(limitedBy(srv), deny)})
	for i := range 6 {
		require.NoError(t, b.check(context.Background(), "x-api-key", "k", "x-password", "right").err, "call %d", i)
	}
	require.Equal(t, 5, failed.Peek("k").Remaining, "successes are free")
	got := map[codes.Code]int{}
	for range 12 {
		got[b.check(context.Background(), "x-api-key", "k").code()]++
	}
	require.Equal(t, map[codes.Code]int{codes.Unauthenticated: 5, codes.ResourceExhausted: 7}, got)
	require.Equal(t, int32(6), b.unary.Load(), "the successes reached the service")
}

// Issue 37.6: a call refused only because calls in flight hold the quota
// of a policy charged by outcome says so, and retries in a second, not at
// the window's end; once that call has failed and is charged, a refusal
// says the window's end (15 minutes).
func TestChargeByCodeInFlight(t *testing.T) {
	mock := newMock()
	failed, err := keylimit.NewFixedWindow[string](keylimit.Per(1, 15*time.Minute), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { failed.Close() })
	srv := newServer(t, grpclimit.Config{
		Key: grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "failed", Limiter: failed, Charge: func(o quota.Outcome) int {
			if o.Status == int(codes.Unauthenticated) {
				return o.Cost
			}
			return 0
		}}},
	})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k"))
	unary := func(handler grpc.UnaryHandler) error {
		_, err := srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod}, handler)
		return err
	}
	refused := func(err error) (string, time.Duration) {
		t.Helper()
		st := status.Convert(err)
		require.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
		require.Len(t, st.Details(), 1)
		return st.Message(), st.Details()[0].(*errdetails.RetryInfo).RetryDelay.AsDuration()
	}
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- unary(func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return nil, status.Error(codes.Unauthenticated, "no")
		})
	}()
	<-entered
	msg, delay := refused(unary(func(context.Context, any) (any, error) { return nil, nil }))
	require.Equal(t, `grpclimit: policy "failed" is held by calls still in flight, not spent: retry in 1s, when one of them may have ended`, msg)
	require.Equal(t, time.Second, delay)
	close(release)
	require.Equal(t, codes.Unauthenticated, status.Code(<-done))
	msg, delay = refused(unary(func(context.Context, any) (any, error) { return nil, nil }))
	require.Equal(t, `grpclimit: rate limit exceeded: policy "failed", retry in 15m0s`, msg)
	require.Equal(t, 15*time.Minute, delay)
}
