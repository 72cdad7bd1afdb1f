package keylimit_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

const (
	ms = time.Millisecond
	s  = time.Second
)

// step is one call on a fixed time grid: at `at` after the limiter's creation
// on a mock clock, call op on key with n, and expect want.
type step struct {
	at   time.Duration
	op   string // "take", "peek" or "reset"
	key  string
	n    int
	want keylimit.Result
}

// runSteps plays steps in order on lim, whose clock is mock, created at
// mock's current time.
func runSteps(t *testing.T, lim keylimit.Limiter[string], mock *clock.Mock, steps []step) {
	t.Helper()
	t0 := mock.Now()
	for i, st := range steps {
		mock.Set(t0.Add(st.at))
		var got keylimit.Result
		switch st.op {
		case "take":
			got = lim.Take(st.key, st.n)
		case "peek":
			got = lim.Peek(st.key)
		case "reset":
			lim.Reset(st.key)
			continue
		default:
			t.Fatalf("step %d: unknown op %q", i, st.op)
		}
		if got != st.want {
			t.Errorf("step %d: at %v %s(%q, %d) =\n\t%+v, want\n\t%+v", i, st.at, st.op, st.key, st.n, got, st.want)
		}
	}
}

func allowed(limit, remaining int, reset time.Duration) keylimit.Result {
	return keylimit.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func refused(limit, remaining int, retry, reset time.Duration) keylimit.Result {
	return keylimit.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func newMockBucket(t testing.TB, l keylimit.Limit, opts ...keylimit.Option) (*keylimit.TokenBucket[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	lim, err := keylimit.NewTokenBucket[string](l, append([]keylimit.Option{keylimit.WithClock(mock)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim, mock
}

func TestTokenBucketSteps(t *testing.T) {
	// Capacity 5, one token a second.
	lim, mock := newMockBucket(t, keylimit.PerSecond(1).WithBurst(5))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(5, 5, 0)},
		{0, "take", "a", 1, allowed(5, 4, 1*s)},
		{0, "take", "a", 4, allowed(5, 0, 5*s)},
		{0, "take", "a", 1, refused(5, 0, 1*s, 5*s)},
		{0, "take", "b", 2, allowed(5, 3, 2*s)}, // keys are independent
		{500 * ms, "take", "a", 1, refused(5, 0, 500*ms, 4500*ms)},
		{500 * ms, "peek", "a", 0, refused(5, 0, 500*ms, 4500*ms)},
		{1 * s, "take", "a", 1, allowed(5, 0, 5*s)},
		{1 * s, "take", "a", 2, refused(5, 0, 2*s, 5*s)},
		// Refill is continuous: at 3.5 s there are 2.5 tokens.
		{3500 * ms, "peek", "a", 0, allowed(5, 2, 2500*ms)},
		{3500 * ms, "take", "a", 2, allowed(5, 0, 4500*ms)},
		{3500 * ms, "take", "a", 1, refused(5, 0, 500*ms, 4500*ms)},
		// The refused calls above took nothing: full at exactly 8 s.
		{8 * s, "peek", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 6, refused(5, 5, keylimit.InfDuration, 0)},
		{20 * s, "take", "a", -1, refused(5, 5, keylimit.InfDuration, 0)},
		{20 * s, "take", "a", 5, allowed(5, 0, 5*s)},
		{20 * s, "reset", "a", 0, keylimit.Result{}},
		{20 * s, "peek", "a", 0, allowed(5, 5, 0)},
		{20 * s, "take", "a", 5, allowed(5, 0, 5*s)},
		{20 * s, "peek", "never-seen", 0, allowed(5, 5, 0)},
	})
	require.Equal(t, 2, lim.Len(), "peek and refused calls create no key")
}

func TestTokenBucketFractionalRefillIsNeverLost(t *testing.T) {
	// 4 a second is one token every 250 ms. Asking every 100 ms, a refill
	// computed as floor(elapsed × rate) with the timestamp reset at each call
	// adds 0 every time and admits only the first burst. Continuous refill
	// admits the burst plus exactly one per 250 ms.
	l := keylimit.PerSecond(4)
	lim, mock := newMockBucket(t, l)
	admitted := 0
	for at := time.Duration(0); at <= 10*s; at += 100 * ms {
		if lim.Allow("k") {
			admitted++
		}
		mock.Add(100 * ms)
	}
	require.Equal(t, l.BurstSize()+int(10*s/l.Interval()), admitted)
}

func TestTokenBucketExactUnderContentionFrozenClock(t *testing.T) {
	// The burst is large so that admissions race for the whole first third
	// of the million attempts, not only for the first few microseconds.
	const burst = 300_000
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1).WithBurst(burst), keylimit.WithClock(newFastClock()))
	require.NoError(t, err)
	defer lim.Close()
	testExactUnderContention(t, lim, burst)
}

// testExactUnderContention makes a million Allow calls on one key of lim, a
// limiter of quota events on a frozen clock, from 100 goroutines: exactly
// quota pass.
func testExactUnderContention(t *testing.T, lim keylimit.Limiter[string], quota int) {
	t.Helper()
	const goroutines = 100
	const attempts = 1_000_000 / goroutines
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range attempts {
				if lim.Allow("hot") {
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, quota, admitted.Load())
	require.Equal(t, 0, lim.Peek("hot").Remaining)
}

func TestTokenBucketExactUnderContentionMixedN(t *testing.T) {
	// Goroutines asking for 1, 2 and 3 tokens at once: the tokens taken add up
	// to the burst exactly (the burst is a multiple of 6 so that every mix fits).
	const burst = 60_000
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1).WithBurst(burst), keylimit.WithClock(newFastClock()))
	require.NoError(t, err)
	defer lim.Close()
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range 30 {
		n := g%3 + 1
		wg.Go(func() {
			for range 10_000 {
				if lim.AllowN("hot", n) {
					taken.Add(int64(n))
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, taken.Load(), int64(burst))
	require.Greater(t, taken.Load(), int64(burst-3), "at most 2 tokens can be left that no request of 3 fits")
	require.Equal(t, burst-int(taken.Load()), lim.Peek("hot").Remaining)
}

func TestTokenBucketExactUnderContentionMovingClock(t *testing.T) {
	// Goroutines hammer one key while they also move the clock forward, in
	// steps that are not a multiple of the interval. Each admission is known
	// to have been decided between two clock readings, before and after the
	// call; for any admissions i <= j (ordered by their before-readings),
	// the admissions decided between before_i and after_j must fit in
	// Burst + (after_j - before_i) / Interval.
	l := keylimit.Per(10, s).WithBurst(20)
	mock := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer lim.Close()
	type admission struct{ before, after time.Time }
	var (
		mu   sync.Mutex
		adms []admission
		wg   sync.WaitGroup
	)
	t0 := mock.Now()
	end := t0.Add(20 * s)
	for range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i%40 == 0 {
					mock.Add(7 * ms)
				}
				before := mock.Now()
				if before.After(end) {
					return
				}
				ok := lim.Allow("hot")
				after := mock.Now()
				if ok {
					mu.Lock()
					adms = append(adms, admission{before, after})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := mock.Now().Sub(t0)

	bound := func(d time.Duration) int { return l.BurstSize() + int(d/l.Interval()) }
	require.LessOrEqual(t, len(adms), bound(elapsed))
	require.Greater(t, len(adms), bound(elapsed)/2, "the limiter admits as the clock moves")
	sort.Slice(adms, func(i, j int) bool { return adms[i].before.Before(adms[j].before) })
	for i := range adms {
		for j := i; j < len(adms); j++ {
			// Admissions k in [i, j] with after_k <= after_j all lie in the window.
			count := 0
			for k := i; k <= j; k++ {
				if !adms[k].after.After(adms[j].after) {
					count++
				}
			}
			if count > bound(adms[j].after.Sub(adms[i].before)) {
				t.Fatalf("%d admissions between %v and %v, bound %d", count,
					adms[i].before.Sub(t0), adms[j].after.Sub(t0), bound(adms[j].after.Sub(adms[i].before)))
			}
		}
	}
}

func TestTokenBucketClockStepsBack(t *testing.T) {
	lim, mock := newMockBucket(t, keylimit.PerSecond(1).WithBurst(3))
	t0 := mock.Now()
	mock.Set(t0.Add(10 * s))
	require.True(t, lim.AllowN("k", 3))

	// Back by 5 s: no token appears, nothing panics.
	mock.Set(t0.Add(5 * s))
	r := lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 0, r.Remaining)
	require.Equal(t, 6*s, r.RetryAfter, "the TAT stays where the admissions left it")

	// Far before the limiter's creation, and far after: still no panic.
	mock.Set(t0.AddDate(-1000, 0, 0))
	require.False(t, lim.Allow("k"))
	require.False(t, lim.Allow("fresh"), "before the creation, even a new key has no tokens")
	mock.Set(t0.Add(10 * s))
	require.False(t, lim.Allow("k"), "stepping back and forth again creates no token")
	mock.Set(t0.Add(11 * s))
	require.True(t, lim.Allow("k"))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.AddDate(1000, 0, 0))
	require.True(t, lim.AllowN("k", 3))
	require.False(t, lim.Allow("k"))
}

func TestTokenBucketAllocs(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1000000))
	require.NoError(t, err)
	defer lim.Close()
	key := fmt.Sprintf("user-%d", 42)
	lim.Allow(key)
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow(key) }), "Allow")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Take(key, 1) }), "Take")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Peek(key) }), "Peek")

	tight, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1))
	require.NoError(t, err)
	defer tight.Close()
	tight.Allow(key)
	require.False(t, tight.Allow(key))
	require.Zero(t, testing.AllocsPerRun(1000, func() { tight.Allow(key) }), "refused Allow")
}

func TestTokenBucketReset(t *testing.T) {
	lim, _ := newMockBucket(t, keylimit.PerHour(2))
	require.True(t, lim.AllowN("a", 2))
	require.True(t, lim.AllowN("b", 2))
	require.False(t, lim.Allow("a"))
	require.Equal(t, 2, lim.Len())
	lim.Reset("a")
	lim.Reset("never-seen")
	require.Equal(t, 1, lim.Len())
	require.True(t, lim.AllowN("a", 2), "a reset key has a full bucket")
	require.False(t, lim.Allow("b"), "other keys keep their state")
}

// advanceUntil advances mock in steps until done is closed, so that a
// goroutine blocked on one of its timers wakes whenever it registered it.
func advanceUntil(t *testing.T, mock *clock.Mock, step time.Duration, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-done:
			return
		default:
			mock.Add(step)
			time.Sleep(time.Millisecond)
		}
	}
}

func TestTokenBucketWait(t *testing.T) {
	lim, mock := newMockBucket(t, keylimit.PerSecond(1).WithBurst(2))
	t0 := mock.Now()
	ctx := context.Background()
	require.NoError(t, lim.WaitN(ctx, "k", 2))
	require.Equal(t, t0, mock.Now(), "no wait while tokens are there")

	done := make(chan struct{})
	var err error
	go func() { defer close(done); err = lim.Wait(ctx, "k") }()
	advanceUntil(t, mock, 100*ms, done)
	require.NoError(t, err)
	waited := mock.Now().Sub(t0)
	require.GreaterOrEqual(t, waited, 1*s, "the token comes after 1 s")
	require.Equal(t, 0, lim.Peek("k").Remaining, "the wait took its token")
}

func TestTokenBucketWaitErrors(t *testing.T) {
	lim, mock := newMockBucket(t, keylimit.PerSecond(1).WithBurst(2))

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
	require.ErrorContains(t, err, "waiting 1s for 1 event would outlast the context deadline, 500ms away")

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	err = lim.Wait(cctx, "k")
	require.ErrorIs(t, err, context.Canceled)
}

func TestTokenBucketWaitCancelledTakesNothing(t *testing.T) {
	lim, mock := newMockBucket(t, keylimit.PerSecond(1).WithBurst(2))
	require.True(t, lim.AllowN("k", 2))

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- lim.WaitN(ctx, "k", 2) }() // needs 2 s
	mock.Add(500 * ms)
	time.Sleep(10 * time.Millisecond) // let it block on its timer
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "keylimit: wait for 2 events")
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled Wait did not return")
	}
	mock.Add(1500 * ms)
	require.Equal(t, 2, lim.Peek("k").Remaining, "the cancelled wait took nothing")
}

func TestTokenBucketKeyTypes(t *testing.T) {
	type client struct {
		id   int
		zone string
	}
	mock := clock.NewMock()
	lim, err := keylimit.NewTokenBucket[client](keylimit.PerMinute(2), keylimit.WithClock(mock))
	require.NoError(t, err)
	defer lim.Close()
	a, b := client{1, "eu"}, client{1, "us"}
	require.True(t, lim.AllowN(a, 2))
	require.False(t, lim.Allow(a))
	require.True(t, lim.Allow(b))
	var _ keylimit.Limiter[client] = lim
}

// hookClock returns its time, and runs hook (once) inside the first Now
// call after it is set: a way to slip another caller's admission between a
// clock read and the CAS it serves.
type hookClock struct {
	*fastClock
	hook func()
}

func (c *hookClock) Now() time.Time {
	now := c.fastClock.Now()
	if h := c.hook; h != nil {
		c.hook = nil
		h()
	}
	return now
}

// TestTokenBucketStaleClockReadIsReread: a caller whose clock read a
// concurrent admission overtook, and which falls short by less than a
// microsecond only because of that, reads the clock again and passes,
// instead of being refused on a time already past.
func TestTokenBucketStaleClockReadIsReread(t *testing.T) {
	clk := &hookClock{fastClock: newFastClock()}
	lim, err := keylimit.NewTokenBucket[string](keylimit.Per(2, 2*ms), keylimit.WithClock(clk), keylimit.WithEvictionInterval(0))
	require.NoError(t, err)
	clk.Add(10 * ms)
	clk.hook = func() {
		clk.Add(500 * time.Nanosecond)
		require.True(t, lim.Allow("k"), "the caller that overtakes")
	}
	require.True(t, lim.Allow("k"), "the overtaken caller: one token was left when it decided")
	require.False(t, lim.Allow("k"), "and none after it")
}
