package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const target = "passthrough:///bufnet" // the target of a bufconn backend

// A client paced at the server's rate, 2 a second with a burst of 1, is
// never refused: each call waits its turn, and reaches the server exactly
// 500 ms after the one before. Unpaced, the same calls are refused but one.
func TestClientPacesCalls(t *testing.T) {
	mock := newMock()
	auto := autoClock{mock} // time passes as the client waits
	rate := keylimit.PerSecond(2).WithBurst(1)
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Method,
		Policies: []quota.Policy{{Name: "second", Limiter: newBucket(t, rate, mock)}},
	})
	pace := &grpclimit.Client{Limiter: newBucket(t, rate, auto), Clock: auto}
	b := start(t, setup{mock: mock, server: limitedBy(srv), client: pacedBy(pace)})

	for i := range 6 {
		require.NoError(t, b.check(context.Background()).err, "call %d", i)
	}
	require.Equal(t, []time.Duration{0, 500 * ms, 1000 * ms, 1500 * ms, 2000 * ms, 2500 * ms}, b.since(), "arrivals")

	again := newServer(t, grpclimit.Config{
		Key:      grpclimit.Method,
		Policies: []quota.Policy{{Name: "second", Limiter: newBucket(t, rate, mock)}},
	})
	unpaced := start(t, setup{server: limitedBy(again)})
	require.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}, unpaced.checks(3))
}

// A wait that would outlast the call's deadline fails at once, sends
// nothing and takes nothing; its status is ResourceExhausted. A call whose
// context has ended is Canceled.
func TestClientWaitIsBoundedByTheDeadline(t *testing.T) {
	mock := newMock()
	lim := newBucket(t, keylimit.PerSecond(2).WithBurst(1), mock)
	b := start(t, setup{client: pacedBy(&grpclimit.Client{Limiter: lim, Clock: mock})})

	require.NoError(t, b.check(context.Background()).err)
	ctx, cancel := mock.WithTimeout(context.Background(), 100*ms)
	defer cancel()
	err := b.check(ctx).err
	we := waitError(t, err)
	require.Equal(t, grpclimit.WaitError{Key: target, Method: checkMethod, Err: we.Err}, *we)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Equal(t, `grpclimit: waiting to call /grpc.health.v1.Health/Check under "passthrough:///bufnet": `+we.Err.Error(), err.Error())
	require.Equal(t, int32(1), b.unary.Load(), "calls sent")
	require.Equal(t, 500*ms, lim.Peek(target).RetryAfter, "the failed wait took nothing")

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	err = b.check(cancelled).err
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, codes.Canceled, status.Code(err))
	require.Equal(t, int32(1), b.unary.Load(), "calls sent")
}

// Against a server limited by grpclimit: the refusal's RetryInfo pauses the
// target; a call whose deadline comes first fails at once without reaching
// the server; the next call goes exactly when the delay ends, and passes.
func TestClientHonoursTheServersDelay(t *testing.T) {
	clk := newCountingClock()
	var seen decisions
	srv := newServer(t, grpclimit.Config{
		Key:        grpclimit.Method,
		Policies:   []quota.Policy{{Name: "second", Limiter: newBucket(t, keylimit.PerSecond(1), clk.Mock)}},
		OnDecision: seen.record,
	})
	b := start(t, setup{mock: clk.Mock, server: limitedBy(srv), client: pacedBy(&grpclimit.Client{Clock: clk})})

	require.NoError(t, b.check(context.Background()).err)
	refused := b.check(context.Background()).err
	require.Equal(t, codes.ResourceExhausted, status.Code(refused), "the server's refusal passes through")

	ctx, cancel := clk.WithTimeout(context.Background(), 500*ms)
	defer cancel()
	we := waitError(t, b.check(ctx).err)
	require.Equal(t, mockStart.Add(s), we.Until, "paused until the RetryInfo delay ends")
	require.ErrorIs(t, we, keylimit.ErrWouldExceedDeadline)
	require.Contains(t, we.Error(), `paused by the server until 2100-01-01T00:00:01Z: keylimit: waiting 1s for 1 event would outlast the context deadline, 500ms away`)

	done := make(chan error, 1)
	go func() { done <- b.check(context.Background()).err }()
	clk.asleep(t, 1)
	clk.Add(s - 1)
	require.Len(t, seen.all(), 2, "nothing is sent before the delay ends")
	clk.Add(1)
	require.NoError(t, <-done)
	require.Equal(t, []time.Duration{0, s}, b.since(), "arrivals at the service")
	require.Len(t, seen.all(), 3, "decisions: one refusal, no more")
}

// A pause holds every caller of the Client, not only the one refused: 5
// goroutines wait it out together, and none reaches the server before it
// ends.
func TestClientPauseHoldsEveryCaller(t *testing.T) {
	clk := newCountingClock()
	script := &scripted{script: first(refusal(codes.ResourceExhausted, durationpb.New(2*s)))}
	b := start(t, setup{mock: clk.Mock, server: script.options(), client: pacedBy(&grpclimit.Client{Clock: clk})})

	require.Equal(t, codes.ResourceExhausted, b.check(context.Background()).code())
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() { errs[i] = b.check(context.Background()).err })
	}
	clk.asleep(t, 5)
	require.Equal(t, int32(1), script.n.Load(), "calls the server saw while paused")
	clk.Add(2 * s)
	wg.Wait()
	require.Equal(t, make([]error, 5), errs)
	require.Equal(t, []time.Duration{2 * s, 2 * s, 2 * s, 2 * s, 2 * s}, b.since(), "arrivals at the service")
}

// What pauses and for how long: RetryInfo or grpc-retry-pushback-ms, the
// larger if both, on ResourceExhausted or Unavailable only, cut to
// MaxPause; a malformed, negative or absent delay pauses nothing.
func TestClientPauses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		pushback []string
		maxPause time.Duration
		want     time.Duration // the pause; 0: none
	}{
		{"RetryInfo", refusal(codes.ResourceExhausted, durationpb.New(1500*ms)), nil, 0, 1500 * ms},
		{"the largest RetryInfo", refusal(codes.ResourceExhausted, durationpb.New(2*s), durationpb.New(3*s), durationpb.New(s)), nil, 0, 3 * s},
		{"pushback alone", refusal(codes.ResourceExhausted), []string{"2500"}, 0, 2500 * ms},
		{"the larger of both", refusal(codes.ResourceExhausted, durationpb.New(s)), []string{"4000"}, 0, 4 * s},
		{"Unavailable", refusal(codes.Unavailable, durationpb.New(2*s)), nil, 0, 2 * s},
		{"a year, cut to the default", refusal(codes.ResourceExhausted, durationpb.New(365*24*time.Hour)), nil, 0, grpclimit.DefaultMaxPause},
		{"beyond any Duration, cut", refusal(codes.ResourceExhausted, &durationpb.Duration{Seconds: 1 << 62}), []string{"99999999999999999999999"}, 5 * s, 5 * s},
		{"another code", refusal(codes.PermissionDenied, durationpb.New(2*s)), []string{"2000"}, 0, 0},
		{"negative", refusal(codes.ResourceExhausted, durationpb.New(-2*s)), []string{"-1"}, 0, 0},
		{"nanos out of range", refusal(codes.ResourceExhausted, &durationpb.Duration{Seconds: 1, Nanos: 2e9}), nil, 0, 0},
		{"nanos of the wrong sign", refusal(codes.ResourceExhausted, &durationpb.Duration{Seconds: 1, Nanos: -1}), nil, 0, 0},
		{"no delay in the RetryInfo", refusal(codes.ResourceExhausted, nil), nil, 0, 0},
		{"two pushbacks", refusal(codes.ResourceExhausted), []string{"1000", "2000"}, 0, 0},
		{"a pushback that is not a number", refusal(codes.ResourceExhausted), []string{"1e3"}, 0, 0},
		{"a huge pushback that is not a number", refusal(codes.ResourceExhausted), []string{"99999999999999999999A"}, 0, 0},
		{"zero", refusal(codes.ResourceExhausted, durationpb.New(0)), []string{"0"}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := newMock()
			script := &scripted{script: first(tc.err, tc.pushback...)}
			b := start(t, setup{server: script.options(), client: pacedBy(&grpclimit.Client{Clock: mock, MaxPause: tc.maxPause})})
			require.Equal(t, status.Code(tc.err), b.check(context.Background()).code())

			ctx, cancel := mock.WithTimeout(context.Background(), 1) // any pause outlasts it
			defer cancel()
			err := b.check(ctx).err
			if tc.want == 0 {
				require.NoError(t, err, "no pause")
				return
			}
			require.Equal(t, mockStart.Add(tc.want), waitError(t, err).Until)
			require.Equal(t, int32(1), script.n.Load(), "calls the server saw")
		})
	}
}

// Streams wait like unary calls, and a stream that ends refused pauses its
// key. Keyed by method, a pause on one method does not hold another.
func TestClientStreamsAndMethodKeys(t *testing.T) {
	mock := newMock()
	script := &scripted{script: first(refusal(codes.ResourceExhausted, durationpb.New(3*s)))}
	b := start(t, setup{server: script.options(), client: pacedBy(&grpclimit.Client{Clock: mock, Key: grpclimit.Method})})

	require.Equal(t, codes.ResourceExhausted, b.watch(t, context.Background()).code())
	ctx, cancel := mock.WithTimeout(context.Background(), s)
	defer cancel()
	err := b.watch(t, ctx).err
	we := waitError(t, err)
	require.Equal(t, grpclimit.WaitError{Key: watchMethod, Method: watchMethod, Until: mockStart.Add(3 * s), Err: we.Err}, *we)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.NoError(t, b.check(ctx).err, "Check is not paused")
	require.Equal(t, int32(2), script.n.Load(), "calls the server saw")
}

// A Key that fails: the call is not sent, and ends with its error.
func TestClientKeyError(t *testing.T) {
	bad := errors.New("no tenant")
	key := func(context.Context, string) (string, error) { return "", bad }
	b := start(t, setup{client: pacedBy(&grpclimit.Client{Key: key})})
	require.ErrorIs(t, b.check(context.Background()).err, bad)
	require.ErrorIs(t, b.watch(t, context.Background()).err, bad)
	require.Equal(t, int32(0), b.unary.Load()+b.streams.Load())
}

// TestWaitErrorQuotesABoundedKey: a WaitError quotes at most 64 runes of
// its key and 256 bytes of its method, either of which may come from a
// request.
func TestWaitErrorQuotesABoundedKey(t *testing.T) {
	e := &grpclimit.WaitError{Method: "/" + strings.Repeat("m", 1000), Key: strings.Repeat("k", 10_000), Err: context.Canceled}
	require.Equal(t, `grpclimit: waiting to call /`+strings.Repeat("m", 255)+` under "`+strings.Repeat("k", 64)+`": context canceled`, e.Error())
}
