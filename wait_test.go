package keylimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// waitCases are the types under the wait tests' limit of 2 per 2 s, on a
// mock clock that starts on a boundary, with how long a key that used its
// quota at the start waits for its next event, and what is left once that
// event is taken.
var waitCases = []struct {
	kind *kind
	wait time.Duration
	left int
}{
	{tokenBucket, 1 * s, 0},    // a token a second
	{fixedWindow, 2 * s, 1},    // the window ends
	{slidingWindow, 2 * s, 1},  // the 2 leave the window
	{slidingCounter, 3 * s, 0}, // 2 × (2 s − 1 s)/2 s + 1 <= 2 in the next window
}

// TestWait: Wait returns at once while the quota lasts, and otherwise when
// the next event fits, having taken it.
func TestWait(t *testing.T) {
	for _, c := range waitCases {
		t.Run(c.kind.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, keylimit.Per(2, 2*s))
			t0 := mock.Now()
			ctx := context.Background()
			require.NoError(t, lim.WaitN(ctx, "k", 2))
			require.Equal(t, t0, mock.Now(), "no wait while the quota lasts")

			done := make(chan struct{})
			var err error
			go func() { defer close(done); err = lim.Wait(ctx, "k") }()
			advanceUntil(t, mock, 100*ms, done)
			require.NoError(t, err)
			require.GreaterOrEqual(t, mock.Now().Sub(t0), c.wait, "the next event fits after %v", c.wait)
			require.Equal(t, c.left, lim.Peek("k").Remaining, "the wait took its event")
		})
	}
}

// TestWaitErrors: a wait that can never pass fails at once, and so does one
// that would outlast its context's deadline; a cancelled context ends it.
func TestWaitErrors(t *testing.T) {
	for _, c := range waitCases {
		t.Run(c.kind.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, keylimit.Per(2, 2*s))
			start := mock.Now()

			err := lim.WaitN(context.Background(), "k", 3)
			require.ErrorIs(t, err, keylimit.ErrExceedsLimit)
			require.ErrorContains(t, err, "3 events can never pass a limit of 2 at once")
			require.ErrorIs(t, lim.WaitN(context.Background(), "k", -1), keylimit.ErrExceedsLimit)

			require.True(t, lim.AllowN("k", 2))
			ctx, cancel := mock.WithTimeout(context.Background(), 500*ms)
			defer cancel()
			err = lim.Wait(ctx, "k")
			require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorContains(t, err, fmt.Sprintf("waiting %v for 1 event would outlast the context deadline, 500ms away", c.wait))
			require.Equal(t, start, mock.Now(), "a wait that fails at once does not sleep")

			cctx, ccancel := context.WithCancel(context.Background())
			ccancel()
			require.ErrorIs(t, lim.Wait(cctx, "k"), context.Canceled)
		})
	}
}

// TestWaitCancelledTakesNothing: a wait cancelled while it sleeps returns at
// once, and takes nothing.
func TestWaitCancelledTakesNothing(t *testing.T) {
	for _, c := range waitCases {
		t.Run(c.kind.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, keylimit.Per(2, 2*s))
			require.True(t, lim.AllowN("k", 2))

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() { errc <- lim.WaitN(ctx, "k", 2) }()
			mock.Add(500 * ms)
			time.Sleep(10 * time.Millisecond) // let it block on its timer
			cancel()
			select {
			case err := <-errc:
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorContains(t, err, "keylimit: wait for 2 events")
			case <-time.After(5 * time.Second):
				require.FailNow(t, "a cancelled Wait did not return")
			}
			mock.Add(lim.Peek("k").ResetAfter)
			require.Equal(t, 2, lim.Peek("k").Remaining, "the cancelled wait took nothing")
		})
	}
}

// TestWaitNOnAll waits on a combination, 1/s and 2/min on one key, by its
// WaitN, which sleeps on its limiters' mock clock. The second event waits
// for the per-second limit, the third for the per-minute one.
func TestWaitNOnAll(t *testing.T) {
	mock := clock.NewMock()
	bs := bucketsOn(t, keylimit.WithClock(mock), keylimit.PerSecond(1), keylimit.PerMinute(2))
	lim := keylimit.All[string](bs[0], bs[1])
	t0 := mock.Now()
	ctx := context.Background()

	require.NoError(t, keylimit.WaitN(ctx, lim, "k", 1))
	require.Equal(t, t0, mock.Now(), "no wait while both admit")

	done := make(chan struct{})
	var err error
	go func() { defer close(done); err = keylimit.WaitN(ctx, lim, "k", 1) }()
	advanceUntil(t, mock, 100*ms, done)
	require.NoError(t, err)
	require.Equal(t, 1*s, mock.Now().Sub(t0), "the second event waits for the 1/s limit")

	// The per-minute limit (burst 2, a token every 30 s) has its next token
	// at 30 s, 29 s from now: a deadline before that fails
	// at once, taking nothing from either limiter.
	dctx, cancel := mock.WithTimeout(ctx, 10*s)
	defer cancel()
	err = keylimit.WaitN(dctx, lim, "k", 1)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorContains(t, err, "waiting 29s for 1 event would outlast the context deadline, 10s away")
	require.Equal(t, 1*s, mock.Now().Sub(t0), "a wait that fails at once does not sleep")
	mock.Add(29 * s)
	require.True(t, lim.Allow("k"), "the failed wait took nothing: the token is there at 30 s")

	require.ErrorIs(t, keylimit.WaitN(ctx, lim, "k", 3), keylimit.ErrExceedsLimit)
}

// TestWaitNPolls: a limiter without a WaitN of its own, a view with only
// Take, is polled on the system clock; one with a Clock method, on its clock.
func TestWaitNPolls(t *testing.T) {
	lim := build(t, keylimit.NewTokenBucket[string], keylimit.Per(1, 20*time.Millisecond))
	require.True(t, lim.Allow("k"))
	start := time.Now()
	require.NoError(t, keylimit.WaitN[string](context.Background(), takeOnly{lim}, "k", 1))
	require.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "the wait slept until the token came back")

	mock := clock.NewMock()
	lim = build(t, keylimit.NewTokenBucket[string], keylimit.PerSecond(1), keylimit.WithClock(mock))
	require.True(t, lim.Allow("k"))
	t0 := mock.Now()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = keylimit.WaitN[string](context.Background(), clockedTakeOnly{takeOnly{lim}, mock}, "k", 1)
	}()
	advanceUntil(t, mock, 100*ms, done)
	require.NoError(t, err)
	require.Equal(t, 1*s, mock.Now().Sub(t0), "the wait slept on the view's mock clock until the token came back")
}

// takeOnly is a view of a limiter with its Take method only.
type takeOnly struct{ lim keylimit.Limiter[string] }

func (v takeOnly) Take(key string, n int) keylimit.Result { return v.lim.Take(key, n) }

// clockedTakeOnly is takeOnly with a Clock method, as a limiter of
// another module (redislimit's) tells its clock.
type clockedTakeOnly struct {
	takeOnly
	clk clock.Clock
}

func (v clockedTakeOnly) Clock() clock.Clock { return v.clk }

// countingClock is a mock clock that counts the timers made on it: each
// sleep of a wait is one timer.
type countingClock struct {
	*clock.Mock
	timers atomic.Int64
}

// Timer counts a timer once the mock has it: a test that saw the count
// rise may move the clock, and the timer fires by the new time.
func (c *countingClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.timers.Add(1)
	return t
}

// queueWaiters starts waiters 0..n-1 on key of lim, each once the one before
// it has gone to sleep (its timer is made), and returns the order they are
// admitted in and the channel of their errors.
func queueWaiters(t *testing.T, lim *keylimit.TokenBucket[string], clk *countingClock, ctxs []context.Context) (order chan int, errs chan error) {
	t.Helper()
	order, errs = make(chan int, len(ctxs)), make(chan error, len(ctxs))
	for i, ctx := range ctxs {
		before := clk.timers.Load()
		go func() {
			err := lim.Wait(ctx, "k")
			if err == nil {
				order <- i
			}
			errs <- err
		}()
		require.Eventually(t, func() bool { return clk.timers.Load() == before+1 }, 5*time.Second, 100*time.Microsecond,
			"waiter %d goes to sleep", i)
	}
	return order, errs
}

// TestWaitFirstComeFirstServed: waiters 1..10 on a drained bucket of 10 a
// second are admitted in the order they came, one every 100 ms, each after
// exactly one sleep.
func TestWaitFirstComeFirstServed(t *testing.T) {
	clk := &countingClock{Mock: clock.NewMock()}
	lim := build(t, keylimit.NewTokenBucket[string], keylimit.PerSecond(10), keylimit.WithClock(clk))
	require.True(t, lim.AllowN("k", 10), "drain the bucket")
	ctxs := make([]context.Context, 10)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	order, _ := queueWaiters(t, lim, clk, ctxs)
	for want := range 10 {
		clk.Add(100 * ms)
		select {
		case got := <-order:
			require.Equal(t, want, got, "at %v the waiter admitted", time.Duration(want+1)*100*ms)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no waiter admitted", "at %v", time.Duration(want+1)*100*ms)
		}
		require.Never(t, func() bool { return len(order) > 0 }, 20*time.Millisecond, time.Millisecond,
			"one waiter every 100 ms")
	}
	require.EqualValues(t, 10, clk.timers.Load(), "one sleep per waiter")
	require.False(t, lim.Allow("k"), "the waiters took every token")
}

// TestWaitCancelMovesTheQueueUp: a waiter that gives up gives back its turn,
// and the waiters behind it, not a newcomer, move up into it: however long
// the queue behind it, a bucket's worth or many.
func TestWaitCancelMovesTheQueueUp(t *testing.T) {
	for _, tc := range []struct {
		burst, waiters, cancel int
	}{
		{burst: 10, waiters: 4, cancel: 1},
		{burst: 1, waiters: 12, cancel: 0},  // the queue behind spans 11 buckets
		{burst: 2, waiters: 12, cancel: 5},  // and 3 buckets
		{burst: 1, waiters: 3, cancel: 2},   // the last: nothing behind
		{burst: 3, waiters: 20, cancel: 19}, // the last of a long queue
	} {
		t.Run(fmt.Sprintf("burst %d, waiter %d of %d", tc.burst, tc.cancel, tc.waiters), func(t *testing.T) {
			clk := &countingClock{Mock: clock.NewMock()}
			lim := build(t, keylimit.NewTokenBucket[string], keylimit.PerSecond(10).WithBurst(tc.burst), keylimit.WithClock(clk))
			require.True(t, lim.AllowN("k", tc.burst), "drain the bucket")
			ctxs := make([]context.Context, tc.waiters)
			for i := range ctxs {
				ctxs[i] = context.Background()
			}
			ctx, cancel := context.WithCancel(context.Background())
			ctxs[tc.cancel] = ctx
			order, errs := queueWaiters(t, lim, clk, ctxs) // turns every 100 ms from 100 ms

			cancel()
			require.ErrorIs(t, <-errs, context.Canceled)
			require.False(t, lim.Allow("k"), "a newcomer does not get the turn given back")
			for want := range tc.waiters {
				if want == tc.cancel {
					continue
				}
				clk.Add(100 * ms)
				select {
				case got := <-order:
					require.Equal(t, want, got)
				case <-time.After(5 * time.Second):
					require.FailNow(t, "no waiter admitted", "want waiter %d at %v", want, clk.Since(time.Unix(0, 0).UTC()))
				}
			}
			last := time.Duration(tc.waiters-1) * 100 * ms
			require.Equal(t, last, clk.Since(time.Unix(0, 0).UTC()), "the last waiter came one turn earlier")
			require.False(t, lim.Allow("k"), "the waiters took every token")
			clk.Add(100 * ms)
			require.True(t, lim.Allow("k"), "a turn later, the token of the waiter who gave up is there for anyone")
			require.False(t, lim.Allow("k"))
		})
	}
}

// TestWaitWithCancelsNeverOverAdmits: 32 goroutines wait on one key of a
// bucket of 100 a second, burst 3, while a third of them give up at random
// and the queue moves up behind them. At every step of the clock, the waits
// that have returned are within the bound, burst + elapsed/interval; at the
// end every wait either was admitted or gave up, none lost.
func TestWaitWithCancelsNeverOverAdmits(t *testing.T) {
	clk := clock.NewMock()
	start := clk.Now()
	lim := build(t, keylimit.NewTokenBucket[string], keylimit.PerSecond(100).WithBurst(3), keylimit.WithClock(clk))
	const goroutines, waits = 32, 10
	var admitted, gaveUp, running atomic.Int64
	failures := make(chan error, goroutines*waits)
	running.Store(goroutines)
	for g := range goroutines {
		go func() {
			defer running.Add(-1)
			for i := range waits {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%3 == 0 {
					time.AfterFunc(time.Duration(g*37+i*11)%400*time.Microsecond, cancel)
				}
				switch err := lim.Wait(ctx, "k"); {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, context.Canceled):
					gaveUp.Add(1)
				default:
					failures <- err
				}
				cancel()
			}
		}()
	}
	for steps := 0; running.Load() > 0; steps++ {
		require.Less(t, steps, 1_000_000, "the waits never ended")
		now := clk.Now().Sub(start)
		bound := int64(3 + now/(10*time.Millisecond))
		require.LessOrEqual(t, admitted.Load(), bound, "admitted by %v", now)
		clk.Add(5 * time.Millisecond)     // half an interval
		time.Sleep(50 * time.Microsecond) // let the woken waiters return
	}
	close(failures)
	for err := range failures {
		require.NoError(t, err)
	}
	require.Equal(t, int64(goroutines*waits), admitted.Load()+gaveUp.Load(), "every wait admitted or given up")
	require.Positive(t, gaveUp.Load(), "some gave up")
	t.Logf("%d admitted, %d gave up, in %v of the clock", admitted.Load(), gaveUp.Load(), clk.Now().Sub(start))
}
