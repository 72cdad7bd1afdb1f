package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A report method that may run once at a time per API key: while one call
// runs, a second for the same key is refused with ResourceExhausted, its
// ratelimit trailer saying no slot is free; another key runs beside it,
// and once the first call has returned its slot is free again.
func ExampleNewServer_concurrent() {
	limits, err := grpclimit.NewServer(grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{quota.Concurrent("reports", 1)},
	})
	if err != nil {
		log.Fatal(err)
	}
	entered, finish := make(chan struct{}), make(chan struct{})
	// Every method is this handler: it reads the request, tells the example
	// it runs, and answers when told to.
	report := func(_ any, stream grpc.ServerStream) error {
		if err := stream.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		entered <- struct{}{}
		<-finish
		return stream.SendMsg(new(emptypb.Empty))
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(report), grpc.ChainStreamInterceptor(limits.StreamInterceptor()))
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	call := func(key string) (metadata.MD, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
		var trailer metadata.MD
		err := conn.Invoke(ctx, "/reports.Reports/Run", new(emptypb.Empty), new(emptypb.Empty), grpc.Trailer(&trailer))
		return trailer, err
	}

	first := make(chan error)
	go func() { _, err := call("k1"); first <- err }()
	<-entered // k1's first call holds its key's one slot
	trailer, err := call("k1")
	fmt.Println("k1, second:", status.Code(err), trailer.Get("ratelimit"))
	second := make(chan error)
	go func() { _, err := call("k2"); second <- err }()
	<-entered
	fmt.Println("k2 runs beside it")
	finish <- struct{}{}
	finish <- struct{}{}
	fmt.Println("k1, first:", status.Code(<-first), "k2:", status.Code(<-second))
	go func() { <-entered; finish <- struct{}{} }()
	_, err = call("k1")
	fmt.Println("k1, again:", status.Code(err))
	// Output:
	// k1, second: ResourceExhausted ["reports";r=0]
	// k2 runs beside it
	// k1, first: OK k2: OK
	// k1, again: OK
}
