package grpclimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// gate is a server interceptor, run after the one under test, that holds
// every unary call until open is closed, and counts the calls in it now
// and the most there ever were at once.
type gate struct {
	open      chan struct{}
	once      sync.Once
	now, most atomic.Int32
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	<-g.open
	g.now.Add(-1)
	return handler(ctx, req)
}

// 20 concurrent unary calls of one key against 5 slots, on 127.0.0.1:
// exactly 5 run at once, the 15 others end with ResourceExhausted, a
// RetryInfo, and the concurrency fields as Trailers-Only metadata; a
// second key's call passes meanwhile; once the 5 end, every slot is free.
func TestConcurrentUnaryCalls(t *testing.T) {
	inflight := newConcurrency(t, 5)
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}},
	})
	g := &gate{open: make(chan struct{})}
	b := start(t, setup{tcp: true, server: append(limitedBy(srv), grpc.ChainUnaryInterceptor(g.unary))})
	t.Cleanup(g.release) // before the server stops

	answers := make(chan answer, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { answers <- b.check(context.Background(), "x-api-key", "a") })
	}
	for i := range 15 {
		var a answer
		select {
		case a = <-answers:
		case <-time.After(10 * s):
			t.Fatalf("%d answers of 20 while 5 are held: more than 5 were admitted", i)
		}
		require.Equal(t, codes.ResourceExhausted, a.code(), "refused %d: %v", i, a.err)
		delay, ok := grpclimit.RetryDelay(a.err)
		require.True(t, ok, "a RetryInfo")
		require.Equal(t, 200*ms, delay, "the estimate before any hold has ended: a second, times the 1 slot needed of 5")
		require.Empty(t, a.header, "Trailers-Only")
		require.Equal(t, `"inflight";q=5;qu="concurrent-requests"`, a.trailed("ratelimit-policy"))
		require.Equal(t, `"inflight";r=0`, a.trailed("ratelimit"))
		require.Equal(t, "1", a.trailed("retry-after"))
	}
	waitFor(t, "5 calls in the handler", func() bool { return g.now.Load() == 5 })

	// Key b's call is held by the gate too: it is admitted, and waits.
	other := make(chan answer, 1)
	go func() { other <- b.check(context.Background(), "x-api-key", "b") }()
	waitFor(t, "b's call in the handler", func() bool { return g.now.Load() == 6 })
	require.Equal(t, 4, inflight.Peek("b").Remaining, "b holds one of its own 5")

	g.release()
	wg.Wait()
	close(answers)
	var rs []string
	for a := range answers {
		require.NoError(t, a.err)
		rs = append(rs, a.get("ratelimit"))
	}
	require.ElementsMatch(t, []string{`"inflight";r=4`, `"inflight";r=3`, `"inflight";r=2`, `"inflight";r=1`, `"inflight";r=0`}, rs,
		"each admitted call's header says the slots it left free")
	require.NoError(t, (<-other).err)
	require.Equal(t, int32(6), g.most.Load(), "5 of a and 1 of b at most")
	require.Equal(t, int32(6), b.unary.Load(), "calls that reached the service")
	require.Equal(t, 5, inflight.Peek("a").Remaining)
	require.Equal(t, 5, inflight.Peek("b").Remaining)
}

// A stream holds its slot while it is open, and releases it when it ends:
// with 2 slots, 2 Watch streams open, a third and a unary call of the key
// are refused, and once a stream is cancelled a new one opens.
func TestConcurrentStreams(t *testing.T) {
	inflight := newConcurrency(t, 2)
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}},
	})
	b := start(t, setup{server: limitedBy(srv)})

	first, cancel := context.WithCancel(context.Background())
	require.NoError(t, b.watch(t, first, "x-api-key", "a").err)
	second := b.watch(t, context.Background(), "x-api-key", "a")
	require.NoError(t, second.err)
	require.Equal(t, `"inflight";r=0`, second.get("ratelimit"))
	require.Equal(t, 0, inflight.Peek("a").Remaining, "two open streams hold both slots")

	refused := b.watch(t, context.Background(), "x-api-key", "a")
	require.Equal(t, codes.ResourceExhausted, refused.code())
	require.Equal(t, `"inflight";r=0`, refused.trailed("ratelimit"))
	require.Equal(t, codes.ResourceExhausted, b.check(context.Background(), "x-api-key", "a").code())

	cancel()
	waitFor(t, "the cancelled stream's slot", func() bool { return inflight.Peek("a").Remaining == 1 })
	require.NoError(t, b.watch(t, context.Background(), "x-api-key", "a").err)
	require.Equal(t, int32(3), b.streams.Load(), "streams that reached the service")
}

// A handler that panics ends its call: the slot is released (the
// interceptors defer Finish), unary and stream alike.
func TestConcurrentSlotReleasedOnPanic(t *testing.T) {
	inflight := newConcurrency(t, 1)
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}},
	})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "a"))
	boom := func() { panic("handler bug") }
	for i := range 2 {
		func() {
			defer func() { require.Equal(t, "handler bug", recover(), "unary %d", i) }()
			srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
				func(context.Context, any) (any, error) { boom(); return nil, nil })
		}()
		require.Equal(t, 1, inflight.Peek("a").Remaining, "after unary panic %d", i)
		func() {
			defer func() { require.Equal(t, "handler bug", recover(), "stream %d", i) }()
			srv.StreamInterceptor()(nil, &serverStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: watchMethod},
				func(any, grpc.ServerStream) error { boom(); return nil })
		}()
		require.Equal(t, 1, inflight.Peek("a").Remaining, "after stream panic %d", i)
	}
	_, err := srv.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: checkMethod},
		func(context.Context, any) (any, error) { return "ok", nil })
	require.NoError(t, err, "the key's slot is free: %v", status.Convert(err))
}

// serverStream is a grpc.ServerStream of a context, outside a server: its
// metadata goes nowhere.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context     { return s.ctx }
func (s *serverStream) SetHeader(metadata.MD) error  { return nil }
func (s *serverStream) SendHeader(metadata.MD) error { return nil }
func (s *serverStream) SetTrailer(metadata.MD)       {}

// A slot policy and a rate policy in one tier, on calls, with exact counts
// both ways: with both slots held, 10 calls are refused for want of a slot
// and take nothing from "hour"; with "hour" used up, 10 calls are refused
// by it and hold no slot.
func TestConcurrentWithRatePolicy(t *testing.T) {
	mock := newMock()
	inflight := newConcurrency(t, 2)
	hour := newBucket(t, keylimit.PerHour(5), mock)
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}, {Name: "hour", Limiter: hour}},
	})
	g := &gate{open: make(chan struct{})}
	held := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-hold")) > 0 {
			return g.unary(ctx, req, info, h)
		}
		return h(ctx, req)
	})
	b := start(t, setup{server: append(limitedBy(srv), held)})
	t.Cleanup(g.release)

	answers := make(chan answer, 2)
	for range 2 {
		go func() { answers <- b.check(context.Background(), "x-api-key", "a", "x-hold", "1") }()
	}
	waitFor(t, "2 calls held", func() bool { return g.now.Load() == 2 })
	for i := range 10 {
		a := b.check(context.Background(), "x-api-key", "a")
		require.Equal(t, codes.ResourceExhausted, a.code(), "call %d", i)
		require.Regexp(t, `^"inflight";r=0, "hour";r=3;t=\d+$`, a.trailed("ratelimit"))
	}
	require.Equal(t, 3, hour.Peek("a").Remaining, "refused for want of a slot: nothing taken from hour")
	g.release()
	require.NoError(t, (<-answers).err)
	require.NoError(t, (<-answers).err)

	for i := range 3 {
		require.NoError(t, b.check(context.Background(), "x-api-key", "a").err, "call %d", i)
	}
	for i := range 10 {
		a := b.check(context.Background(), "x-api-key", "a")
		require.Equal(t, codes.ResourceExhausted, a.code(), "call %d", i)
		require.Regexp(t, `^"inflight";r=2, "hour";r=0;t=\d+$`, a.trailed("ratelimit"))
		require.Equal(t, 2, inflight.Peek("a").Remaining, "refused by hour, call %d holds no slot", i)
	}
	require.Equal(t, int32(5), b.unary.Load(), "hour's 5 reached the service")
}
