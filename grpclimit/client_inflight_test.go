package grpclimit_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// slowServer is a server interceptor, unary and stream, under which each
// call runs until the test lets one finish (finish), and which counts the
// calls running at once. A unary call runs its handler once let go; a
// stream ends then, with no message (its client reads io.EOF).
type slowServer struct {
	done  chan struct{}
	mu    sync.Mutex
	order []string // x-seq of each arrival; protected by mu
	now   int      // calls running; protected by mu
	most  int      // the most calls running at once; protected by mu
}

func newSlowServer(t *testing.T) *slowServer {
	s := &slowServer{done: make(chan struct{})}
	t.Cleanup(func() { close(s.done) }) // the server's Stop waits for its handlers
	return s
}

func (s *slowServer) run(ctx context.Context) {
	seq := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("x-seq")) > 0 {
		seq = md.Get("x-seq")[0]
	}
	s.mu.Lock()
	s.order = append(s.order, seq)
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
}

func (s *slowServer) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			s.run(ctx)
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			s.run(ss.Context())
			return nil
		}),
	}
}

func (s *slowServer) finish() { s.done <- struct{}{} }

func (s *slowServer) arrived() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

func (s *slowServer) running() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now, s.most
}

func newConcurrency(t *testing.T, n int, opts ...keylimit.Option) *keylimit.Concurrency[string] {
	t.Helper()
	lim, err := keylimit.NewConcurrency[string](n, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	return lim
}

// 20 concurrent calls against a cap of 3, unary calls and server streams
// (each read to its io.EOF): the server never runs more than 3 at once (and
// runs 3), the other 17 queue and are sent in the order they queued as each
// call ends, and all 20 succeed.
func TestClientCapsCallsInFlight(t *testing.T) {
	t.Run("unary", func(t *testing.T) {
		testClientCapsCallsInFlight(t, func(b *backend, seq string) error {
			return b.check(context.Background(), "x-seq", seq).err
		})
	})
	t.Run("stream", func(t *testing.T) {
		testClientCapsCallsInFlight(t, func(b *backend, seq string) error {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-seq", seq)
			stream, err := b.health.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if _, err := stream.Recv(); err != io.EOF {
				return fmt.Errorf("the stream ended with %v, not io.EOF", err)
			}
			return nil
		})
	})
}

func testClientCapsCallsInFlight(t *testing.T, call func(b *backend, seq string) error) {
	const n, limit = 20, 3
	slow := newSlowServer(t)
	lim := newConcurrency(t, limit)
	b := start(t, setup{server: slow.options(), client: pacedBy(&grpclimit.Client{Concurrency: lim})})

	errs := make([]error, n) // each written by its own goroutine, read after Wait
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = call(b, strconv.Itoa(i)) })
		if i < limit {
			waitFor(t, fmt.Sprintf("call %d at the server", i), func() bool { return len(slow.arrived()) == i+1 })
		} else {
			waitFor(t, fmt.Sprintf("call %d queued", i), func() bool { return lim.Stats().Waiting == i-limit+1 })
		}
	}
	now, _ := slow.running()
	require.Equal(t, limit, now, "running at the server")
	for i := limit; i < n; i++ {
		slow.finish()
		waitFor(t, fmt.Sprintf("call %d at the server", i), func() bool { return len(slow.arrived()) == i+1 })
		require.Equal(t, strconv.Itoa(i), slow.arrived()[i], "arrival %d", i)
		require.Equal(t, n-i-1, lim.Stats().Waiting, "still queued after arrival %d", i)
	}
	for range limit {
		slow.finish()
	}
	wg.Wait()

	require.Equal(t, make([]error, n), errs, "every call succeeded")
	_, most := slow.running()
	require.Equal(t, limit, most, "the most running at once")
	require.Equal(t, limit, lim.Peek(target).Remaining, "every slot back")
}

// A call queued for a slot whose context ends is not sent, holds nothing,
// and ends with a *WaitError that says so: Canceled or DeadlineExceeded.
func TestClientCancelWhileQueuedFreesNothing(t *testing.T) {
	slow := newSlowServer(t)
	lim := newConcurrency(t, 1)
	b := start(t, setup{server: slow.options(), client: pacedBy(&grpclimit.Client{Concurrency: lim})})

	first := make(chan error, 1)
	go func() { first <- b.check(context.Background(), "x-seq", "0").err }()
	waitFor(t, "the first call at the server", func() bool { return len(slow.arrived()) == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { cancelled <- b.check(ctx, "x-seq", "1").err }()
	waitFor(t, "the second call queued", func() bool { return lim.Stats().Waiting == 1 })
	cancel()
	err := <-cancelled
	we := waitError(t, err)
	require.Equal(t, target, we.Key)
	require.Equal(t, codes.Canceled, status.Code(err))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "grpclimit: queued behind 1 call in flight, the most at once: keylimit: acquire 1 slot: context canceled")
	require.Equal(t, 0, lim.Peek(target).Remaining, "the first call still holds the one slot")

	short, cancelShort := context.WithTimeout(context.Background(), 20*ms)
	defer cancelShort()
	err = b.check(short, "x-seq", "2").err
	waitError(t, err)
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	require.ErrorContains(t, err, "queued behind 1 call in flight, the most at once: keylimit: acquire 1 slot: context deadline exceeded")
	require.Equal(t, 0, lim.Stats().Waiting)

	slow.finish()
	require.NoError(t, <-first)
	require.Equal(t, 1, lim.Peek(target).Remaining)
	third := make(chan error, 1)
	go func() { third <- b.check(context.Background(), "x-seq", "3").err }()
	waitFor(t, "the third call at the server", func() bool { return len(slow.arrived()) == 2 })
	slow.finish()
	require.NoError(t, <-third)
	require.Equal(t, []string{"0", "3"}, slow.arrived(), "the calls given up on were never sent")
}

// ends is a server stream interceptor that ends a stream at once as its
// x-end metadata says: "eof" with no message, "abort" with Aborted;
// without it, the handler runs (Watch sends a message and waits).
func ends() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		switch v := md.Get("x-end"); {
		case slices.Equal(v, []string{"eof"}):
			return nil
		case slices.Equal(v, []string{"abort"}):
			return status.Error(codes.Aborted, "scripted end")
		}
		return handler(srv, ss)
	})
}

// A stream holds its slot until it ends: RecvMsg's io.EOF or error, its
// context ending, or, for a method whose server sends one message, that
// message. A unary call holds it while it runs.
func TestClientStreamHoldsItsSlotUntilItEnds(t *testing.T) {
	lim := newConcurrency(t, 1)
	var during []int // the free slots the unary call saw at the server
	peek := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		during = append(during, lim.Peek(target).Remaining)
		return handler(ctx, req)
	})
	b := start(t, setup{server: []grpc.ServerOption{ends(), peek}, client: pacedBy(&grpclimit.Client{Concurrency: lim})})
	free := func() int { return lim.Peek(target).Remaining }

	require.NoError(t, b.check(context.Background()).err)
	require.Equal(t, []int{0}, during, "held during the unary call")
	require.Equal(t, 1, free(), "back once it returned")

	// A stream whose context ends.
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := b.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	require.Equal(t, 0, free(), "held while the stream runs")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	queued := make(chan error, 1)
	go func() {
		stream, err := b.health.Watch(ctx2, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		queued <- err
	}()
	waitFor(t, "a second stream queued", func() bool { return lim.Stats().Waiting == 1 })
	cancel()
	require.NoError(t, <-queued, "the second stream opens once the first's context ended")
	require.Equal(t, 0, free(), "held by the second stream")
	cancel2()
	waitFor(t, "the slot back once the second stream's context ended", func() bool { return free() == 1 })

	// Streams the server ends: RecvMsg sees io.EOF, or an error.
	for _, end := range []string{"eof", "abort"} {
		stream, err := b.health.Watch(metadata.AppendToOutgoingContext(context.Background(), "x-end", end), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, end)
		require.Equal(t, 0, free(), "%s: held while open", end)
		_, err = stream.Recv()
		if end == "eof" {
			require.ErrorIs(t, err, io.EOF)
		} else {
			require.Equal(t, codes.Aborted, status.Code(err))
		}
		require.Equal(t, 1, free(), "%s: back as RecvMsg returns", end)
	}

	// A stream of a method whose server sends one message ends with it.
	cs, err := b.conn.NewStream(context.Background(), &grpc.StreamDesc{}, checkMethod)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(&healthpb.HealthCheckRequest{}))
	require.NoError(t, cs.CloseSend())
	require.Equal(t, 0, free(), "held until the answer")
	require.NoError(t, cs.RecvMsg(new(healthpb.HealthCheckResponse)))
	require.Equal(t, 1, free(), "back with the one message")
}

// A stream its caller leaves open, under a context that never ends, holds
// its slot until WithMaxHold takes it back: the call queued behind it is
// then sent.
func TestClientMaxHoldTakesBackALeftStream(t *testing.T) {
	mock := newMock()
	lim := newConcurrency(t, 1, keylimit.WithClock(mock), keylimit.WithMaxHold(time.Minute))
	b := start(t, setup{client: pacedBy(&grpclimit.Client{Concurrency: lim})})

	stream, err := b.health.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err) // and never read again

	next := make(chan error, 1)
	go func() { next <- b.check(context.Background()).err }()
	waitFor(t, "the call queued", func() bool { return lim.Stats().Waiting == 1 })
	for range 2 {
		mock.Add(time.Minute)
	}
	var err2 error
	waitFor(t, "the queued call sent", func() bool {
		select {
		case err2 = <-next:
			return true
		default:
			mock.Add(time.Minute) // the waiter's wake-up may have been set after the first Add
			return false
		}
	})
	require.NoError(t, err2)
	require.EqualValues(t, 1, lim.Stats().Reclaimed)
	require.EqualValues(t, 1, b.unary.Load(), "calls that reached the server")
}
