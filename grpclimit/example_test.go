package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A gRPC health service limited to 2 calls a minute per API key, over an
// in-memory connection, and a client that calls it three times. Every
// answer carries the RateLimit fields, an admitted call as header metadata;
// the third call is refused with ResourceExhausted, its fields in the
// trailer and no header (Trailers-Only, which grpc-go's retry policy can
// retry), and a RetryInfo detail says when it can pass.
func Example() {
	mock := clock.NewMock() // stands for time here; leave WithClock out in production
	minute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	defer minute.Close()
	limits, err := grpclimit.NewServer(grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limits.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(limits.StreamInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20) // or net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for i := 1; i <= 3; i++ {
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		delay, _ := grpclimit.RetryDelay(err)
		fmt.Printf("%d %v header %v, trailer %v, retry in %v\n", i, status.Code(err),
			header.Get("ratelimit"), trailer.Get("ratelimit"), delay)
	}
	// Output:
	// 1 OK header ["minute";r=1;t=30], trailer [], retry in 0s
	// 2 OK header ["minute";r=0;t=30], trailer [], retry in 0s
	// 3 ResourceExhausted header [], trailer ["minute";r=0;t=30], retry in 30s
}

// A client that stays under a server's limit of 2 calls a second. Each call
// waits for its turn, but never past its deadline: the third, whose turn is
// 500 ms away, has a deadline 100 ms away and fails at once, unsent, saying
// so.
func ExampleClient() {
	mock := clock.NewMock() // stands for time here; leave Clock nil in production
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	defer perSecond.Close()
	pace := &grpclimit.Client{Limiter: perSecond, Clock: mock}
	client, stop := exampleHealth(nil,
		grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()),
		grpc.WithChainStreamInterceptor(pace.StreamInterceptor()))
	defer stop()

	for i := 1; i <= 2; i++ {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(i, status.Code(err))
	}
	ctx, cancel := mock.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println(3, status.Code(err), errors.Is(err, keylimit.ErrWouldExceedDeadline))
	fmt.Println(err)
	// Output:
	// 1 OK
	// 2 OK
	// 3 ResourceExhausted true
	// grpclimit: waiting to call /grpc.health.v1.Health/Check under "passthrough:///bufnet": keylimit: waiting 500ms for 1 event would outlast the context deadline, 100ms away
}

// The server refuses the second call and asks for 30 s. The Client pauses
// the target for every caller until then: a call with a 10 s deadline
// fails at once, unsent; 30 s later calls go through again.
func ExampleClient_UnaryInterceptor() {
	mock := clock.NewMock()
	minute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2).WithBurst(1), keylimit.WithClock(mock))
	defer minute.Close()
	limits, _ := grpclimit.NewServer(grpclimit.Config{
		Key:      grpclimit.Method,
		Policies: []quota.Policy{{Name: "minute", Limiter: minute}},
	})
	pace := &grpclimit.Client{Clock: mock}
	client, stop := exampleHealth(
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(limits.UnaryInterceptor())},
		grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()))
	defer stop()

	call := func(timeout time.Duration) {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if timeout > 0 {
			ctx, cancel = mock.WithTimeout(ctx, timeout)
		}
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		var wait *grpclimit.WaitError
		if errors.As(err, &wait) {
			fmt.Printf("%v, unsent: paused for %v more\n", status.Code(err), wait.Until.Sub(mock.Now()))
			return
		}
		fmt.Println(status.Code(err))
	}
	call(0)
	call(0)                // refused by the server: retry in 30s
	call(10 * time.Second) // fails at once
	mock.Add(30 * time.Second)
	call(0)
	// Output:
	// OK
	// ResourceExhausted
	// ResourceExhausted, unsent: paused for 30s more
	// OK
}

// RetryDelay reads the delay of a refusal's RetryInfo detail, as a
// grpclimit server sends it.
func ExampleRetryDelay() {
	st, _ := status.New(codes.ResourceExhausted, "slow down").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	fmt.Println(grpclimit.RetryDelay(st.Err()))
	fmt.Println(grpclimit.RetryDelay(errors.New("not a gRPC status")))
	// Output:
	// 1.5s true
	// 0s false
}

// A server that runs one call at a time per client. The Client holds the
// target's one slot for as long as a call runs, and a stream until it
// ends: a call queued behind an open stream fails, unsent, when its
// deadline passes first; once the stream's context ends, calls go again.
func ExampleClient_concurrency() {
	oneAtATime, _ := keylimit.NewConcurrency[string](1, keylimit.WithMaxHold(10*time.Minute))
	defer oneAtATime.Close()
	pace := &grpclimit.Client{Concurrency: oneAtATime}
	client, stop := exampleHealth(nil,
		grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()),
		grpc.WithChainStreamInterceptor(pace.StreamInterceptor()))
	defer stop()

	watching, endWatch := context.WithCancel(context.Background())
	watch, _ := client.Watch(watching, &healthpb.HealthCheckRequest{})
	_, err := watch.Recv()
	fmt.Println("watching:", status.Code(err))

	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = client.Check(short, &healthpb.HealthCheckRequest{})
	fmt.Println("check:", status.Code(err))
	fmt.Println(err)

	endWatch() // the stream ends, and gives its slot back
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("check:", status.Code(err))
	// Output:
	// watching: OK
	// check: DeadlineExceeded
	// grpclimit: waiting to call /grpc.health.v1.Health/Check under "passthrough:///bufnet": grpclimit: queued behind 1 call in flight, the most at once: keylimit: acquire 1 slot: context deadline exceeded
	// check: OK
}
