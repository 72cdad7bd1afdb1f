package grpclimit_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
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

// The helpers of the package's tests. Assertions: testify's require on the
// test's goroutine; a helper that runs on another goroutine (an
// interceptor, a callback, a goroutine a test starts) never asserts, it
// records what it saw and the test asserts afterwards.

const (
	ms = time.Millisecond
	s  = time.Second
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// ---- Clocks ----

// start is where the mock clocks of the tests start: a fixed time, so that
// the times tests print are fixed, and one far ahead, so that a deadline
// set on the mock clock is far in the future for gRPC too, which sends
// deadlines as real time left.
var mockStart = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

func newMock() *clock.Mock {
	m := clock.NewMock()
	m.Set(mockStart)
	return m
}

// countingClock is a mock clock that counts the timers made on it, so that
// a test can wait until the goroutines it started are all asleep on the
// clock before it moves the clock.
type countingClock struct {
	*clock.Mock
	timers *atomic.Int32
}

func newCountingClock() countingClock { return countingClock{newMock(), new(atomic.Int32)} }

func (c countingClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.timers.Add(1)
	return t
}

// asleep waits until n timers have been made on c.
func (c countingClock) asleep(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d timers", n), func() bool { return int(c.timers.Load()) >= n })
}

// autoClock is a mock clock that lets time pass by itself whenever someone
// waits on it: a Timer of d moves the clock d forward at once. With one
// goroutine at a time waiting, a test runs on exact simulated time, at once.
type autoClock struct{ *clock.Mock }

func (c autoClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.Mock.Add(d)
	return t
}

// waitFor polls cond in real time until it holds, failing the test after
// 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(time.Millisecond)
	}
}

// ---- Limiters and server interceptors ----

// newBucket returns a TokenBucket of l read on c, closed when the test ends.
func newBucket(t testing.TB, l keylimit.Limit, c clock.Clock, opts ...keylimit.Option) *keylimit.TokenBucket[string] {
	t.Helper()
	b, err := keylimit.NewTokenBucket[string](l, append(opts, keylimit.WithClock(c))...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// newServer returns the interceptors of c, failing the test on an error.
func newServer(t testing.TB, c grpclimit.Config) *grpclimit.Server {
	t.Helper()
	srv, err := grpclimit.NewServer(c)
	require.NoError(t, err)
	return srv
}

// decisions records the decisions of a server interceptor (OnDecision).
type decisions struct {
	mu   sync.Mutex
	list []quota.Decision
}

func (d *decisions) record(_ context.Context, _ string, dec quota.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.list = append(d.list, dec)
}

func (d *decisions) all() []quota.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]quota.Decision(nil), d.list...)
}

// keys returns the keys of the decisions, in order.
func (d *decisions) keys() []string {
	var ks []string
	for _, dec := range d.all() {
		ks = append(ks, dec.Key)
	}
	return ks
}

// ---- A real server and client ----

// backend is a gRPC server on a listener of its own, serving the health
// service (Check, unary; Watch, a server stream) behind the interceptors it
// was started with, and counting the calls and streams that reach the
// service past them.
type backend struct {
	conn    *grpc.ClientConn
	health  healthpb.HealthClient
	unary   atomic.Int32 // calls that reached Check
	streams atomic.Int32 // streams that reached Watch
	// arrivals are the times on the mock clock, if one was given, at which
	// calls reached the service, in order.
	mu       sync.Mutex
	arrivals []time.Time
}

// setup says how to start a backend.
type setup struct {
	tcp    bool        // listen on 127.0.0.1, a free port; else bufconn
	mock   clock.Clock // the clock arrivals are read on; nil: none read
	server []grpc.ServerOption
	client []grpc.DialOption
}

// start starts a backend as su says, with a client connection to it, and
// stops both when the test ends.
func start(t testing.TB, su setup) *backend {
	t.Helper()
	b := &backend{}
	counter := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		b.unary.Add(1)
		b.arrived(su.mock)
		return handler(ctx, req)
	}
	streamCounter := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		b.streams.Add(1)
		b.arrived(su.mock)
		return handler(srv, ss)
	}
	// The counters run after the interceptors under test: ChainXInterceptor
	// options add up, in order.
	opts := append(append([]grpc.ServerOption(nil), su.server...),
		grpc.ChainUnaryInterceptor(counter), grpc.ChainStreamInterceptor(streamCounter))
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())

	var lis net.Listener
	target := "passthrough:///bufnet"
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, su.client...)
	if su.tcp {
		var err error
		lis, err = net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		target = lis.Addr().String()
	} else {
		buf := bufconn.Listen(1 << 20)
		lis = buf
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return buf.DialContext(ctx) }))
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(target, dial...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	b.conn, b.health = conn, healthpb.NewHealthClient(conn)
	return b
}

func (b *backend) arrived(c clock.Clock) {
	if c == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrivals = append(b.arrivals, c.Now())
}

// since returns the arrival times as durations since the mock clock's
// start.
func (b *backend) since() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ds []time.Duration
	for _, a := range b.arrivals {
		ds = append(ds, a.Sub(mockStart))
	}
	return ds
}

// limitedBy returns a setup whose server runs the interceptors of srv.
func limitedBy(srv *grpclimit.Server) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(srv.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(srv.StreamInterceptor()),
	}
}

// pacedBy returns the dial options of a client paced by c.
func pacedBy(c *grpclimit.Client) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamInterceptor()),
	}
}

// answer is what one unary call got: its error and metadata.
type answer struct {
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func (a answer) code() codes.Code { return status.Code(a.err) }

// get returns the first value of the header metadata key k.
func (a answer) get(k string) string {
	if v := a.header.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// trailed returns the first value of the trailer metadata key k.
func (a answer) trailed(k string) string {
	if v := a.trailer.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// check calls Check on b under ctx, with the metadata given as key, value
// pairs.
func (b *backend) check(ctx context.Context, kv ...string) answer {
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var a answer
	_, a.err = b.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// checks makes n calls to Check on b with the metadata kv, and returns their
// codes.
func (b *backend) checks(n int, kv ...string) []codes.Code {
	var cs []codes.Code
	for range n {
		cs = append(cs, b.check(context.Background(), kv...).code())
	}
	return cs
}

// watch opens a Watch stream on b under ctx and reads its first message;
// the stream is cancelled when the test ends.
func (b *backend) watch(t *testing.T, ctx context.Context, kv ...string) answer {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, kv...))
	t.Cleanup(cancel)
	var a answer
	stream, err := b.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		a.err = err
		return a
	}
	_, a.err = stream.Recv()
	a.header, _ = stream.Header()
	a.trailer = stream.Trailer()
	return a
}

// ---- Refusals a test server scripts ----

// refusal returns a status error of code with a RetryInfo detail of each
// delay given.
func refusal(code codes.Code, delays ...*durationpb.Duration) error {
	st := status.New(code, "scripted refusal")
	for _, d := range delays {
		var err error
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: d})
		if err != nil {
			panic(err)
		}
	}
	return st.Err()
}

// scripted is a server interceptor, unary and stream, that ends the n-th
// call (from 0) with the error script returns and the trailer pushback (if
// not nil), or lets it through if the error is nil.
type scripted struct {
	script func(n int) (pushback []string, err error)
	n      atomic.Int32
}

func (sc *scripted) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			pushback, err := sc.script(int(sc.n.Add(1) - 1))
			if pushback != nil {
				grpc.SetTrailer(ctx, metadata.MD{"grpc-retry-pushback-ms": pushback})
			}
			if err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			pushback, err := sc.script(int(sc.n.Add(1) - 1))
			if pushback != nil {
				ss.SetTrailer(metadata.MD{"grpc-retry-pushback-ms": pushback})
			}
			if err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	}
}

// first returns a script that ends the first call with err and pushback and
// lets every other through.
func first(err error, pushback ...string) func(int) ([]string, error) {
	return func(n int) ([]string, error) {
		if n == 0 {
			return pushback, err
		}
		return nil, nil
	}
}

// waitError returns err as a *WaitError, failing the test if it is not one.
func waitError(t *testing.T, err error) *grpclimit.WaitError {
	t.Helper()
	we, ok := err.(*grpclimit.WaitError)
	require.True(t, ok, "error %v (%T) is not a *WaitError", err, err)
	return we
}

// ---- The examples' server ----

// exampleHealth starts a health service on bufconn behind the server
// options given, and returns a client for it, dialled with the options
// given, and a function that stops both.
func exampleHealth(server []grpc.ServerOption, client ...grpc.DialOption) (healthpb.HealthClient, func()) {
	srv := grpc.NewServer(server...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
	}, client...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		panic(err)
	}
	return healthpb.NewHealthClient(conn), func() { conn.Close(); srv.Stop() }
}

// ---- Adaptive throttling ----

// seeded returns a source of random numbers in [0, 1), the same for the
// same seed, safe for concurrent use.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// throttleModel is the throttling formula written plainly, for one key:
// counts decayed by e each window, a call rejected with probability
// max(0, (calls − k·accepts) / (calls + 1)).
type throttleModel struct {
	k              float64
	window         time.Duration
	calls, accepts float64
	at             time.Time
}

func (m *throttleModel) decay(now time.Time) {
	f := math.Exp(-float64(now.Sub(m.at)) / float64(m.window))
	m.calls, m.accepts, m.at = m.calls*f, m.accepts*f, now
}

// admit returns the probability of rejection at now and whether u sends
// the call; one rejected counts at once.
func (m *throttleModel) admit(now time.Time, u float64) (float64, bool) {
	m.decay(now)
	p := max(0, (m.calls-m.k*m.accepts)/(m.calls+1))
	if u < p {
		m.calls++
	}
	return p, u >= p
}

// answered counts one sent at its answer, at now, and its accept.
func (m *throttleModel) answered(now time.Time, accepted bool) {
	m.decay(now)
	m.calls++
	if accepted {
		m.accepts++
	}
}

// failing returns server options that end every call (unary or stream)
// with the code fail returns, or let it through if it returns OK, and
// count the calls that reach them.
func failing(reached *atomic.Int32, fail func() codes.Code) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			reached.Add(1)
			if code := fail(); code != codes.OK {
				return nil, status.Error(code, "scripted failure")
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			reached.Add(1)
			if code := fail(); code != codes.OK {
				return status.Error(code, "scripted failure")
			}
			return handler(srv, ss)
		}),
	}
}

// watchOnce opens a Watch stream on b, reads its first message and ends
// the stream by cancelling it; it returns the error of the opening or of
// the read. It asserts nothing, so that any goroutine may call it.
func (b *backend) watchOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// chargeReported is a Policy.Charge that charges the cost the handler
// reported, or the whole cost if it reported none.
func chargeReported(o quota.Outcome) int {
	if o.Reported < 0 {
		return o.Cost
	}
	return o.Reported
}
