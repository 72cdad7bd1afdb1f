// Command grpc-demo shows grpclimit on a real gRPC server and real clients
// over 127.0.0.1: the server's interceptors refuse a call over the limit
// with ResourceExhausted and a RetryInfo delay, and send the RateLimit
// fields as metadata; the client's interceptors wait out that delay, and
// pace a burst so that the server refuses nothing.
//
//	cd grpclimit && go run ./cmd/grpc-demo
//
// keylimit-demo, the tour of the repository's root, runs it as one of its
// scenes.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func main() {
	if err := run(os.Stdout, clock.New()); err != nil {
		fmt.Fprintln(os.Stderr, "grpc-demo:", err)
		os.Exit(1)
	}
}

// The server's limit: serverRate calls a second per API key, as many at
// once (a token bucket); the calls each client has to make; how often the
// plain client tries a refused call again.
const (
	serverRate = 5
	callsEach  = 8
	retryEvery = 50 * time.Millisecond
)

// run serves the health service behind grpclimit's server interceptors on
// a free port of 127.0.0.1, calls it with a plain client and with clients
// paced by grpclimit.Client, all on clk, and says what happened. The
// clients sleep only with clk.Timer, so that a test can make time pass by
// itself on a mock.
func run(w io.Writer, clk clock.Clock) error {
	seen := &ledger{clk: clk, keys: map[string]*tally{}}
	addr, stop, err := serve(clk, seen)
	if err != nil {
		return err
	}
	defer stop()

	fmt.Fprintf(w, "A gRPC server on 127.0.0.1 (the standard health service) allows each API key %d calls\n", serverRate)
	fmt.Fprintf(w, "a second: %d at once, then one every %v (a token bucket behind grpclimit's interceptors).\n", serverRate, time.Second/serverRate)
	if err := plainBurst(w, clk, addr); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nEach client below has %d calls to make, and sends a refused one again until it passes:\n", callsEach)
	if err := pacedClients(w, clk, addr, seen); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ngrpclimit.Client reads each refusal's RetryInfo and holds the retry, and every other call")
	fmt.Fprintln(w, "sharing the Client, until the delay has passed. With a limit of its own, one call under")
	fmt.Fprintln(w, "the server's burst (a margin for the network's jitter), it spaces the calls to the")
	fmt.Fprintln(w, "server's rate.")
	return nil
}

// serve starts the health service behind grpclimit's server interceptors,
// serverRate calls a second per API key on clk, each decision noted in
// seen, on a free port of 127.0.0.1. It returns the address, and stop,
// which stops the server and its limiter.
func serve(clk clock.Clock, seen *ledger) (addr string, stop func(), err error) {
	perSecond, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(serverRate), keylimit.WithClock(clk))
	if err != nil {
		return "", nil, err
	}
	limits, err := grpclimit.NewServer(grpclimit.Config{
		Key:        grpclimit.Metadata("x-api-key"),
		Policies:   []quota.Policy{{Name: "second", Limiter: perSecond}},
		OnDecision: seen.record,
	})
	if err != nil {
		perSecond.Close()
		return "", nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limits.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(limits.StreamInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		perSecond.Close()
		return "", nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		srv.Stop()
		<-served
		perSecond.Close()
	}, nil
}

// pacedClients makes callsEach calls with each of three clients, a plain
// one and two paced by grpclimit.Client, each sending a refused call again
// until it passes, and says what seen noted of each.
func pacedClients(w io.Writer, clk clock.Clock, addr string, seen *ledger) error {
	own, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(serverRate).WithBurst(serverRate-1), keylimit.WithClock(clk))
	if err != nil {
		return err
	}
	defer own.Close()
	clients := []struct {
		title, key string
		pace       *grpclimit.Client // nil: a plain client, retrying every retryEvery
	}{
		{fmt.Sprintf("a plain client, trying again every %v", retryEvery), "bob", nil},
		{"grpclimit.Client, which waits out the server's RetryInfo delay", "carol", &grpclimit.Client{Clock: clk}},
		{fmt.Sprintf("grpclimit.Client with a limit of its own, %d/s with a burst of %d", serverRate, serverRate-1), "dave",
			&grpclimit.Client{Limiter: own, Clock: clk}},
	}
	for _, c := range clients {
		took, err := retryLoop(clk, addr, c.key, c.pace)
		if err != nil {
			return fmt.Errorf("%s: %w", c.key, err)
		}
		fmt.Fprintf(w, "  %s (%q):\n", c.title, c.key)
		report(w, seen.of(c.key), took)
	}
	return nil
}

// report says what s noted of a client that made its calls in took.
func report(w io.Writer, s tally, took time.Duration) {
	if s.refused == 0 {
		fmt.Fprintf(w, "      %d calls in %v; %d sent, none refused\n", callsEach, took, s.sent)
		return
	}
	fmt.Fprintf(w, "      %d calls in %v; %d sent, %d refused: %d%% wasted\n", callsEach, took, s.sent, s.refused, s.refused*100/s.sent)
	when := "not before RetryInfo's %v"
	if s.early > 0 {
		when = "before RetryInfo's %v"
	}
	fmt.Fprintf(w, "      retried %v after a refusal, "+when+": %d of %d retries refused\n",
		s.retryGap.Round(10*time.Millisecond), s.asked.Round(10*time.Millisecond), s.refusedRetries, s.refused)
}

// plainBurst sends callsEach calls in a row as alice with a client that
// has no interceptor, and shows the answers: their codes, the RateLimit
// fields of the first, and what a refusal carries.
func plainBurst(w io.Writer, clk clock.Clock, addr string) error {
	conn, err := dial(addr, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	var codes []string
	var first, refusedHeader, refusedTrailer metadata.MD
	var refusal error
	passed := 0
	for range callsEach {
		var header, trailer metadata.MD
		err := check(clk, client, "alice", grpc.Header(&header), grpc.Trailer(&trailer))
		codes = append(codes, status.Code(err).String())
		switch {
		case err == nil:
			passed++
		case refusal == nil:
			refusal, refusedHeader, refusedTrailer = err, header, trailer
		}
		if first == nil {
			first = header
		}
	}
	fmt.Fprintf(w, "\nA plain client calls %d times in a row as \"alice\":\n", callsEach)
	fmt.Fprintf(w, "  %s\n", strings.Join(codes, " "))
	fmt.Fprintf(w, "  %d passed, %d refused: %s.\n", passed, callsEach-passed, overBy(passed, serverRate))
	if refusal == nil {
		return fmt.Errorf("no call of %d was refused", callsEach)
	}
	delay, ok := grpclimit.RetryDelay(refusal)
	if !ok {
		return fmt.Errorf("the refusal %v has no RetryInfo", refusal)
	}
	fmt.Fprintln(w, "  every admitted call carries the RateLimit fields as header metadata; the 1st:")
	fmt.Fprintf(w, "      %s\n", fields(first, "ratelimit-policy", "ratelimit"))
	fmt.Fprintf(w, "  the %s, refused: %s, with a RetryInfo detail: retry in %v\n", ordinal(passed+1), status.Code(refusal), ceilMillis(delay))
	fmt.Fprintf(w, "      trailer metadata  %s\n", fields(refusedTrailer, "ratelimit", "retry-after", "grpc-retry-pushback-ms"))
	if len(refusedHeader) == 0 {
		fmt.Fprintln(w, "      and no header: a Trailers-Only answer, the refusal gRPC's own retry policy retries")
	} else {
		fmt.Fprintf(w, "      header metadata   %v\n", refusedHeader)
	}
	fmt.Fprintln(w, "  (q: the quota; w: seconds an empty bucket takes to fill; r: calls left; t: seconds")
	fmt.Fprintln(w, "   until one more is back; retry-after: RetryInfo's delay in whole seconds, rounded up)")
	return nil
}

// retryLoop makes callsEach calls as key through a client paced by pace, or
// with no interceptor if pace is nil, and sends each refused call again
// until it passes: at once through pace, which holds it as long as the
// server asked; every retryEvery without. It returns how long the calls
// took, to 100 ms.
func retryLoop(clk clock.Clock, addr, key string, pace *grpclimit.Client) (time.Duration, error) {
	conn, err := dial(addr, pace)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	start := clk.Now()
	for range callsEach {
		for {
			err := check(clk, client, key)
			if err == nil {
				break
			}
			if _, refused := grpclimit.RetryDelay(err); !refused {
				return 0, err // not the server's refusal: the demo is broken
			}
			if pace == nil {
				sleep(clk, retryEvery) // whatever RetryInfo said
			}
		}
	}
	return clk.Since(start).Round(100 * time.Millisecond), nil
}

// dial returns a connection to the server at addr, through pace's
// interceptors if pace is not nil.
func dial(addr string, pace *grpclimit.Client) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if pace != nil {
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(pace.UnaryInterceptor()),
			grpc.WithChainStreamInterceptor(pace.StreamInterceptor()))
	}
	return grpc.NewClient(addr, opts...)
}

// check makes one health check as API key key, with a deadline 10 s away
// on clk (a call the Client would hold longer fails at once).
func check(clk clock.Clock, client healthpb.HealthClient, key string, opts ...grpc.CallOption) error {
	ctx, cancel := clk.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// sleep waits d on clk, by a Timer: a test's clock makes the time pass
// when it is asked for one.
func sleep(clk clock.Clock, d time.Duration) {
	t := clk.Timer(d)
	defer t.Stop()
	<-t.C
}

// ceilMillis is d rounded up to a whole millisecond, as the server rounds
// the pushback it sends beside RetryInfo.
func ceilMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		d += time.Millisecond - r
	}
	return d
}

// fields prints the metadata of md under names, "name: value", in order.
func fields(md metadata.MD, names ...string) string {
	var out []string
	for _, n := range names {
		out = append(out, n+": "+strings.Join(md.Get(n), ", "))
	}
	return strings.Join(out, "  ")
}

// overBy gives a count of passed calls its verdict against the server's
// limit.
func overBy(passed, limit int) string {
	if passed == limit {
		return "the limit, exactly"
	}
	return fmt.Sprintf("%d passed where the limit is %d", passed, limit)
}

// ordinal is "1st", "2nd", "3rd", "6th".
func ordinal(n int) string {
	switch {
	case n%100/10 == 1:
		return fmt.Sprintf("%dth", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}

// ledger is what the server decided, for each API key: the server's own
// count of the calls each client sent and of those it refused.
type ledger struct {
	clk  clock.Clock
	mu   sync.Mutex
	keys map[string]*tally
}

// tally is the server's record of one key's calls.
type tally struct {
	sent, refused  int
	refusedRetries int           // refused calls that came after a refusal
	early          int           // calls that came after a refusal, before its delay was over
	asked          time.Duration // the delay of the key's first refusal
	retryGap       time.Duration // the shortest time from a refusal to the next call

	lastRefused time.Time     // when the last call was refused, or zero if it passed
	lastDelay   time.Duration // the delay the last refusal asked for
}

// record is the server's Config.OnDecision.
func (l *ledger) record(_ context.Context, _ string, d quota.Decision) {
	now := l.clk.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.keys[d.Key]
	if c == nil {
		c = new(tally)
		l.keys[d.Key] = c
	}
	c.sent++
	if !c.lastRefused.IsZero() { // a retry
		gap := now.Sub(c.lastRefused)
		if c.retryGap == 0 || gap < c.retryGap {
			c.retryGap = gap
		}
		if gap < c.lastDelay {
			c.early++
		}
		if !d.Result.Allowed {
			c.refusedRetries++
		}
	}
	c.lastRefused = time.Time{}
	if !d.Result.Allowed {
		if c.refused == 0 {
			c.asked = d.Result.RetryAfter
		}
		c.refused++
		c.lastRefused, c.lastDelay = now, d.Result.RetryAfter
	}
}

// of returns a copy of key's record.
func (l *ledger) of(key string) tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.keys[key]; c != nil {
		return *c
	}
	return tally{}
}
