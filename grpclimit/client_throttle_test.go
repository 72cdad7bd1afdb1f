package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClientThrottlesAFailingServer: a grpc-go server on 127.0.0.1 ends
// every call with Unavailable for 5 s, between 2 s of health and 5 s of
// health again; a client makes 100 calls a second, one at a time, on a
// mock clock, through a Client with Throttle 2. During the failure the
// Client sends no more than 1.2 × what the formula lets through (the sum
// of 1 − p over the attempts) and under a fifth of the attempts; from 2 s
// after the server recovers it sends every call again. Its decisions are,
// one by one, those of the formula written plainly (throttleModel) with
// the same random numbers.
func TestClientThrottlesAFailingServer(t *testing.T) {
	const step, warm, failure, after = 10 * ms, 2 * s, 5 * s, 5 * s
	mock := newMock()
	t0 := mock.Now()
	failFrom, failTo := t0.Add(warm), t0.Add(warm+failure)
	var reached atomic.Int32
	down := failing(&reached, func() codes.Code {
		if now := mock.Now(); !now.Before(failFrom) && now.Before(failTo) {
			return codes.Unavailable
		}
		return codes.OK
	})
	pace := &grpclimit.Client{Throttle: 2, Clock: mock}
	grpclimit.SetRand(pace, seeded(1))
	b := start(t, setup{tcp: true, server: down, client: pacedBy(pace)})
	model, u := &throttleModel{k: 2, window: 250 * ms, at: t0}, seeded(1)

	type phase struct {
		attempts, sent int
		allowed        float64 // Σ (1 − p): what the formula lets through
		lastThrottled  time.Duration
	}
	var phases [3]phase // healthy, failing, recovered
	for now := t0; now.Before(failTo.Add(after)); now = now.Add(step) {
		mock.Set(now)
		ph := &phases[0]
		if !now.Before(failTo) {
			ph = &phases[2]
		} else if !now.Before(failFrom) {
			ph = &phases[1]
		}
		err := b.check(context.Background()).err
		p, send := model.admit(now, u())
		ph.attempts++
		ph.allowed += 1 - p
		if !send {
			require.ErrorIs(t, err, grpclimit.ErrThrottled, "at %v", now.Sub(t0))
			require.Equal(t, codes.Unavailable, status.Code(err))
			ph.lastThrottled = now.Sub(t0)
			continue
		}
		require.False(t, errors.Is(err, grpclimit.ErrThrottled), "at %v: the formula sends it (p %.3f)", now.Sub(t0), p)
		ph.sent++
		model.answered(now, err == nil)
	}
	t.Logf("phases (healthy, failing, recovered): %+v", phases)
	require.Equal(t, phases[0].attempts, phases[0].sent, "a healthy server gets every call")
	require.Equal(t, phases[0].sent+phases[1].sent+phases[2].sent, int(reached.Load()), "a throttled call reaches nobody")
	fail := phases[1]
	require.LessOrEqual(t, float64(fail.sent), 1.2*fail.allowed, "sent during the failure, against what the formula allows")
	require.Less(t, fail.sent, fail.attempts/5, "the Client stops hammering the server")
	require.Less(t, phases[2].lastThrottled, warm+failure+2*s, "every call goes from 2 s after the recovery")
}

// TestClientThrottleCountsWhatTheServerSays: on a frozen clock, with random
// numbers of 0.5, the third call (unary, or a stream) to a server that
// failed the first two is rejected (p 2/3), and to one that accepted them
// sent (p 0). A refusal, a timeout, Internal, Unknown and DataLoss are
// failures; OK and the codes about the call itself are accepts; a call
// the client cancelled is not counted.
func TestClientThrottleCountsWhatTheServerSays(t *testing.T) {
	cases := []struct {
		code      codes.Code
		throttled bool
	}{
		{codes.OK, false}, {codes.NotFound, false}, {codes.InvalidArgument, false},
		{codes.PermissionDenied, false}, {codes.FailedPrecondition, false},
		{codes.Canceled, false},
		{codes.ResourceExhausted, true}, {codes.Unavailable, true}, {codes.DeadlineExceeded, true},
		{codes.Internal, true}, {codes.Unknown, true}, {codes.DataLoss, true},
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("stream=%v/%v", stream, tc.code), func(t *testing.T) {
				var reached atomic.Int32
				pace := &grpclimit.Client{Throttle: 2, Clock: newMock()}
				grpclimit.SetRand(pace, func() float64 { return 0.5 })
				b := start(t, setup{server: failing(&reached, func() codes.Code { return tc.code }), client: pacedBy(pace)})
				var err error
				for range 3 {
					if stream {
						err = b.watch(t, context.Background()).err
					} else {
						err = b.check(context.Background()).err
					}
				}
				if !tc.throttled {
					require.False(t, errors.Is(err, grpclimit.ErrThrottled), "third call: %v", err)
					require.Equal(t, int32(3), reached.Load())
					return
				}
				require.ErrorIs(t, err, grpclimit.ErrThrottled)
				require.Equal(t, codes.Unavailable, status.Code(err))
				method := checkMethod
				if stream {
					method = watchMethod
				}
				require.Equal(t, "grpclimit: not calling "+method+` under "passthrough:///bufnet": grpclimit: throttled locally, `+
					`rejected with probability 0.67 = (requests 2.0 − K 2 × accepts 0.0) / (requests + 1), counted over 250ms`, err.Error())
				require.Equal(t, int32(2), reached.Load())
			})
		}
	}
}

// A call whose context is cancelled while it is out is not counted; one
// whose deadline passes is a failure. On a frozen clock with random
// numbers of 0.5: after two cancelled calls the third goes; after two
// timeouts it is rejected.
func TestClientThrottleAndTheCallersContext(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		pace := &grpclimit.Client{Throttle: 2, Clock: newMock()}
		grpclimit.SetRand(pace, func() float64 { return 0.5 })
		hang := make(chan struct{})
		t.Cleanup(func() { close(hang) })
		var reached atomic.Int32
		b := start(t, setup{server: failing(&reached, func() codes.Code { <-hang; return codes.OK }), client: pacedBy(pace)})
		var err error
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 50*ms)
			if cancelled { // no deadline: a loaded machine cannot let it pass first
				ctx, cancel = context.WithCancel(context.Background())
				go func() { // cancels the call once it has reached the server
					for reached.Load() <= int32(i) {
						time.Sleep(ms)
					}
					cancel()
				}()
			}
			err = b.check(ctx).err
			cancel()
		}
		if cancelled {
			require.Equal(t, codes.Canceled, status.Code(err))
			require.Equal(t, int32(3), reached.Load())
			continue
		}
		require.ErrorIs(t, err, grpclimit.ErrThrottled)
		require.Equal(t, int32(2), reached.Load())
	}
}

// TestClientThrottleUnderManyGoroutines: 64 goroutines make 20 calls each
// at once, unary and streams, through one Client with Throttle and
// Concurrency, to a server that accepts one call in three and fails the
// rest, on a frozen clock. Every call is sent or throttled, none both;
// the server sees exactly those sent; every slot comes back; and the
// Client counted exactly every attempt and every accept (the counts in the
// message of a rejection with K 1).
func TestClientThrottleUnderManyGoroutines(t *testing.T) {
	const goroutines, each = 64, 20
	mock := newMock()
	var reached, accepted atomic.Int32
	down := failing(&reached, func() codes.Code {
		if reached.Load()%3 == 1 { // the first, the fourth, ...
			accepted.Add(1)
			return codes.OK
		}
		return codes.Unavailable
	})
	slots, err := keylimit.NewConcurrency[string](8, keylimit.WithClock(mock))
	require.NoError(t, err)
	pace := &grpclimit.Client{Throttle: 2, Concurrency: slots, Clock: mock}
	grpclimit.SetRand(pace, seeded(7))
	b := start(t, setup{tcp: true, server: down, client: pacedBy(pace)})

	var throttled, sent atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				var err error
				if (g+i)%2 == 0 {
					err = b.check(context.Background()).err
				} else {
					err = b.watchOnce(context.Background())
				}
				if errors.Is(err, grpclimit.ErrThrottled) {
					throttled.Add(1)
				} else {
					sent.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls sent, %d accepted, %d throttled", sent.Load(), accepted.Load(), throttled.Load())
	require.Equal(t, int32(goroutines*each), sent.Load()+throttled.Load())
	require.Equal(t, sent.Load(), reached.Load())
	require.Positive(t, throttled.Load())
	waitFor(t, "every slot back", func() bool { return slots.Peek(b.conn.Target()).Remaining == 8 })

	pace.Throttle = 1 // p > 0: the next call is rejected
	grpclimit.SetRand(pace, func() float64 { return 0 })
	err = b.check(context.Background()).err
	require.ErrorContains(t, err, fmt.Sprintf("(requests %d.0 − K 1 × accepts %d.0)", goroutines*each, accepted.Load()))
}

// A Throttle below 1 fails every call, unsent, saying why.
func TestClientThrottleMustBeValid(t *testing.T) {
	var reached atomic.Int32
	pace := &grpclimit.Client{Throttle: 0.5}
	b := start(t, setup{server: failing(&reached, func() codes.Code { return codes.OK }), client: pacedBy(pace)})
	err := b.check(context.Background()).err
	require.ErrorContains(t, err, "grpclimit: Client.Throttle is 0.5: it must be 0 (off) or a finite number of at least 1")
	require.Zero(t, reached.Load())
}

// TestClientDropsTheSlotOfAFailure: with an adaptive.Limiter for
// Concurrency (AIMD from 1 to 100: the limit starts at the floor, 1; slow
// start doubles it after each window of 16 releases, busy with one call at
// a time, to 4 after 32; a window with a drop ends slow start and cuts it
// by a tenth, to the floor), 32 calls one at a
// time, unary or streams, give their slots back by Drop when the server
// fails them, and the limit falls; by Release when it accepts them, and it
// stays.
func TestClientDropsTheSlotOfAFailure(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, tc := range []struct {
			code    codes.Code
			dropped bool
		}{{codes.OK, false}, {codes.NotFound, false}, {codes.Unavailable, true}, {codes.ResourceExhausted, true}, {codes.Internal, true}} {
			t.Run(fmt.Sprintf("stream=%v/%v", stream, tc.code), func(t *testing.T) {
				adaptive, err := adaptive.New[string](adaptive.AIMD(1, 100), keylimit.WithClock(newMock()))
				require.NoError(t, err)
				defer adaptive.Close()
				require.Equal(t, 1, adaptive.Stats().Limit)
				var reached atomic.Int32
				pace := &grpclimit.Client{Concurrency: adaptive}
				b := start(t, setup{server: failing(&reached, func() codes.Code { return tc.code }), client: pacedBy(pace)})
				for range 32 {
					if stream {
						b.watchOnce(context.Background())
					} else {
						b.check(context.Background())
					}
					waitFor(t, "the slot back", func() bool { return adaptive.Peek(target).Remaining == adaptive.Peek(target).Limit })
				}
				require.Equal(t, int32(32), reached.Load())
				if tc.dropped {
					require.Equal(t, 1, adaptive.Stats().Limit, "the slots went back by Drop: slow start ended, the limit cut to the floor")
				} else {
					require.Equal(t, 4, adaptive.Stats().Limit, "the slots went back by Release: slow start doubled the limit twice")
				}
			})
		}
	}
}
