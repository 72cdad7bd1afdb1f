package keylimit_test

// The helpers of the package's tests, and nothing else: every function or
// type that more than one test uses lives here; what one test alone uses
// sits beside it. The fuzz targets' reference models live in fuzz_test.go.
//
// Assertions (the rule, also in the README): testify's require for every
// check on the test's goroutine; other goroutines never assert: they count
// or collect, and the test's goroutine asserts afterwards.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/stretchr/testify/require"
)

// full runs the tests that prove a large-scale property (a million keys, a
// million attempts on one key) at their full size: go test . -args -full.
// By default they run at a size that proves the same property in less time.
var full = flag.Bool("full", false, "run the large-scale tests at full size")

// sized returns small, or large under -full.
func sized(small, large int) int {
	if *full {
		return large
	}
	return small
}

const (
	ms = time.Millisecond
	s  = time.Second
)

// The limiter types.

// limiter is what the tests use of every limiter type: the whole public
// method set the four share.
type limiter interface {
	keylimit.Limiter[string]
	keylimit.Refunder[string]
	SetLimit(keylimit.Limit) error
	Limit() keylimit.Limit
	Stats() keylimit.Stats
	Wait(ctx context.Context, key string) error
	WaitN(ctx context.Context, key string, n int) error
	Close() error
}

// constructor is the shape of every limiter constructor: NewTokenBucket[K],
// NewFixedWindow[K], NewSlidingWindow[K], NewSlidingCounter[K].
type constructor[L any] func(keylimit.Limit, ...keylimit.Option) (L, error)

// build returns the limiter of l that ctor makes with opts, closed when the
// test ends.
func build[L interface{ Close() error }](t testing.TB, ctor constructor[L], l keylimit.Limit, opts ...keylimit.Option) L {
	t.Helper()
	lim, err := ctor(l, opts...)
	require.NoError(t, err, "a limiter of %v", l)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim
}

// kind is one limiter type, for the tests that run on each.
type kind struct {
	name string
	// new is the type's constructor on string keys, as a limiter.
	new constructor[limiter]
	// refill is how many Periods after its last admission a key has its
	// whole quota again: 2 for the SlidingCounter, whose previous window
	// weighs on the whole next one.
	refill time.Duration
	// maxEvents is the largest Events the type takes per key (0: no cap
	// that a test meets).
	maxEvents int
}

// kindOf makes a kind of a constructor.
func kindOf[L limiter](name string, ctor constructor[L], refill time.Duration, maxEvents int) *kind {
	return &kind{name, func(l keylimit.Limit, opts ...keylimit.Option) (limiter, error) {
		lim, err := ctor(l, opts...)
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return lim, nil
	}, refill, maxEvents}
}

var (
	tokenBucket    = kindOf("TokenBucket", keylimit.NewTokenBucket[string], 1, 0)
	fixedWindow    = kindOf("FixedWindow", keylimit.NewFixedWindow[string], 1, 0)
	slidingWindow  = kindOf("SlidingWindow", keylimit.NewSlidingWindow[string], 1, keylimit.MaxSlidingWindowEvents)
	slidingCounter = kindOf("SlidingCounter", keylimit.NewSlidingCounter[string], 2, 0)

	kinds       = []*kind{tokenBucket, fixedWindow, slidingWindow, slidingCounter}
	windowKinds = []*kind{fixedWindow, slidingWindow, slidingCounter}
)

// make returns a limiter of l of the kind with opts, closed when the test
// ends.
func (k *kind) make(t testing.TB, l keylimit.Limit, opts ...keylimit.Option) limiter {
	t.Helper()
	return build(t, k.new, l, opts...)
}

// mock returns a limiter of l of the kind on a new mock clock, which starts
// at the Unix epoch (so on a boundary of every window of a whole number of
// seconds).
func (k *kind) mock(t testing.TB, l keylimit.Limit, opts ...keylimit.Option) (limiter, *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	return k.make(t, l, append([]keylimit.Option{keylimit.WithClock(mock)}, opts...)...), mock
}

// on returns a limiter of l of the kind on c, a fastClock: frozen unless the
// test moves it.
func (k *kind) on(t testing.TB, c *fastClock, l keylimit.Limit, opts ...keylimit.Option) limiter {
	t.Helper()
	return k.make(t, l, append([]keylimit.Option{keylimit.WithClock(c)}, opts...)...)
}

// bucketsOn returns token buckets of the given limits sharing one clock.
func bucketsOn(t *testing.T, c keylimit.Option, limits ...keylimit.Limit) []*keylimit.TokenBucket[string] {
	t.Helper()
	var out []*keylimit.TokenBucket[string]
	for _, l := range limits {
		out = append(out, build(t, keylimit.NewTokenBucket[string], l, c))
	}
	return out
}

// Step tables.

// step is one call on a fixed time grid: at `at` after the limiter's creation
// on a mock clock, call op on key with n, and expect want.
type step struct {
	at   time.Duration // or farPast, farFuture
	op   string        // "take", "peek", "allow" or "admit" (want.Allowed only), "refund" or "reset"
	key  string
	n    int
	want keylimit.Result
}

// farPast and farFuture, as a step's at, are a thousand years before and
// after the limiter's creation: further than int64 nanoseconds reach.
const (
	farPast   = time.Duration(math.MinInt64)
	farFuture = time.Duration(math.MaxInt64)
)

// runSteps plays steps in order on lim, whose clock is mock, created at
// mock's current time.
//
// "admit" is Admit, which records the key's admissions; "refund" gives back
// the n-th latest of them (1: the latest).
func runSteps(t *testing.T, lim limiter, mock *clock.Mock, steps []step) {
	t.Helper()
	t0 := mock.Now()
	admitted := map[string][]keylimit.Admission{}
	for i, st := range steps {
		switch st.at {
		case farPast:
			mock.Set(t0.AddDate(-1000, 0, 0))
		case farFuture:
			mock.Set(t0.AddDate(1000, 0, 0))
		default:
			mock.Set(t0.Add(st.at))
		}
		var got keylimit.Result
		switch st.op {
		case "take":
			got = lim.Take(st.key, st.n)
		case "peek":
			got = lim.Peek(st.key)
		case "allow":
			require.Equal(t, st.want.Allowed, lim.AllowN(st.key, st.n), "step %d: at %v AllowN(%q, %d)", i, st.at, st.key, st.n)
			continue
		case "admit":
			r, a := lim.Admit(st.key, st.n)
			require.Equal(t, st.want.Allowed, r.Allowed, "step %d: at %v Admit(%q, %d)", i, st.at, st.key, st.n)
			if r.Allowed {
				admitted[st.key] = append(admitted[st.key], a)
			}
			continue
		case "refund":
			adms := admitted[st.key]
			require.LessOrEqual(t, st.n, len(adms), "step %d: refund of admission %d of %q, which has %d", i, st.n, st.key, len(adms))
			lim.Refund(st.key, adms[len(adms)-st.n])
			continue
		case "reset":
			lim.Reset(st.key)
			continue
		default:
			require.Fail(t, "unknown op", "step %d: op %q", i, st.op)
		}
		if st.want.RefillAfter == 0 {
			got = refillChecked(t, got, "step %d: at %v %s(%q, %d)", i, st.at, st.op, st.key, st.n)
		}
		require.Equal(t, st.want, got, "step %d: at %v %s(%q, %d)", i, st.at, st.op, st.key, st.n)
	}
}

// refillChecked checks what r's RefillAfter must be against its other
// fields, and returns r without it, for the tables that do not give it
// (the models of fuzz_test.go and TestRefillAfter check its value): 0
// exactly when the quota is whole, never beyond ResetAfter, and when
// refused, never beyond RetryAfter.
func refillChecked(t *testing.T, r keylimit.Result, format string, args ...any) keylimit.Result {
	t.Helper()
	if r.Untracked || r.Err != nil {
		r.RefillAfter = 0
		return r
	}
	at := fmt.Sprintf(format, args...)
	require.Equal(t, r.Remaining >= r.Limit, r.RefillAfter == 0, "%s: RefillAfter %v with %d of %d left", at, r.RefillAfter, r.Remaining, r.Limit)
	require.LessOrEqual(t, r.RefillAfter, r.ResetAfter, at)
	if !r.Allowed {
		require.LessOrEqual(t, r.RefillAfter, r.RetryAfter, at)
	}
	r.RefillAfter = 0
	return r
}

func allowed(limit, remaining int, reset time.Duration) keylimit.Result {
	return keylimit.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func refused(limit, remaining int, retry, reset time.Duration) keylimit.Result {
	return keylimit.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// refilled is r with RefillAfter d.
func refilled(r keylimit.Result, d time.Duration) keylimit.Result {
	r.RefillAfter = d
	return r
}

// verdict is the want of an "allow" step.
func verdict(ok bool) keylimit.Result { return keylimit.Result{Allowed: ok} }

// Clocks.

// fastClock is a clock for tests that move time by hand from one goroutine
// while many others read it: Now is one atomic load, where clock.Mock takes a
// mutex on every read and sleeps a millisecond on every move. Only Now (and
// Since) follow it; its timers and tickers are an embedded clock.Mock's, which
// never fire, so it suits tests that do not Wait.
type fastClock struct {
	clock.Clock
	ns atomic.Int64 // Unix ns
}

func newFastClock() *fastClock {
	c := &fastClock{Clock: clock.NewMock()}
	c.ns.Store(time.Unix(1e9, 0).UnixNano())
	return c
}

func (c *fastClock) Now() time.Time                  { return time.Unix(0, c.ns.Load()) }
func (c *fastClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *fastClock) Add(d time.Duration)             { c.ns.Add(int64(d)) }

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

// waitFor polls cond until it holds, failing the test after a long real-time
// deadline. It waits for background work (the evictor); it asserts nothing
// about speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Checks.

// testAllocs checks that Allow, Take and Peek allocate nothing on a key lim
// has seen, that Admit and Refund allocate nothing but, every 64
// admissions, the block of the onces the Admissions' copies share (issue
// 37.8; AllocsPerRun rounds 1/64 down to 0), and that a refused Allow, Take
// and Admit allocate nothing on a key full has refused (full's quota is 1).
func testAllocs(t *testing.T, lim, full keylimit.Limiter[string]) {
	t.Helper()
	key := fmt.Sprintf("user-%d", 42) // not a constant the compiler can place
	lim.Allow(key)
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow(key) }), "Allow")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Take(key, 1) }), "Take")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Peek(key) }), "Peek")
	r := lim.(keylimit.Refunder[string])
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		_, a := r.Admit(key, 1)
		r.Refund(key, a)
	}), "Admit and Refund")

	require.True(t, full.Allow(key))
	require.False(t, full.Allow(key))
	require.Zero(t, testing.AllocsPerRun(1000, func() { full.Allow(key) }), "refused Allow")
	require.Zero(t, testing.AllocsPerRun(1000, func() { full.Take(key, 1) }), "refused Take")
	require.Zero(t, testing.AllocsPerRun(1000, func() { full.(keylimit.Refunder[string]).Admit(key, 1) }), "refused Admit")
}

// timedAdmission is one admission of n events, with the clock read before
// and after its call in ns: it was decided at a time in between.
type timedAdmission struct {
	before, after int64
	n             int
}

// hammer has goroutines call Allow on one key of lim, on clk, each moving
// clk by step every `every` calls and then calling onStep (if not nil),
// until clk has moved span. It returns the admissions, sorted by before, and
// how many steps were taken. Only the test's goroutine asserts: the first
// error of onStep ends every goroutine and fails the test.
func hammer(t *testing.T, lim keylimit.Limiter[string], clk *fastClock, goroutines, every int, step, span time.Duration, onStep func() error) ([]timedAdmission, int64) {
	t.Helper()
	var (
		mu    sync.Mutex
		adms  []timedAdmission
		errs  []error
		wg    sync.WaitGroup
		steps atomic.Int64
		stop  atomic.Bool
	)
	end := clk.Now().Add(span).UnixNano()
	for range goroutines {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if i%every == 0 {
					clk.Add(step)
					steps.Add(1)
					if onStep != nil {
						if err := onStep(); err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
							stop.Store(true)
							return
						}
					}
				}
				before := clk.Now().UnixNano()
				if before > end {
					return
				}
				if lim.Allow("hot") {
					after := clk.Now().UnixNano()
					mu.Lock()
					adms = append(adms, timedAdmission{before, after, 1})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	sort.Slice(adms, func(i, j int) bool { return adms[i].before < adms[j].before })
	return adms, steps.Load()
}

// checkBucketBound checks a token bucket's bound on admissions sorted by
// before: for any admissions i <= j, those decided between before_i and
// after_j fit in burst + (after_j − before_i) / interval.
func checkBucketBound(t *testing.T, adms []timedAdmission, burst int, interval time.Duration) {
	t.Helper()
	bound := func(d int64) int { return burst + int(d/int64(interval)) }
	for i := range adms {
		for j := i; j < len(adms); j++ {
			// Admissions k in [i, j] with after_k <= after_j all lie in the window.
			count := 0
			for k := i; k <= j; k++ {
				if adms[k].after <= adms[j].after {
					count += adms[k].n
				}
			}
			d := adms[j].after - adms[i].before
			require.LessOrEqual(t, count, bound(d), "admissions from %d ns over %v", adms[i].before, time.Duration(d))
		}
	}
}

// checkSlidingBound checks a sliding window's bound: at most most events in
// any interval (t − period, t]. For each admission, the events of those
// whose readings both lie in the period up to its end are counted.
func checkSlidingBound(t *testing.T, adms []timedAdmission, most int, period time.Duration) {
	t.Helper()
	byAfter := append([]timedAdmission(nil), adms...)
	sort.Slice(byAfter, func(i, j int) bool { return byAfter[i].after < byAfter[j].after })
	for _, a := range byAfter {
		from := a.after - int64(period)
		hi := sort.Search(len(byAfter), func(i int) bool { return byAfter[i].after > a.after })
		in := 0
		for k := hi - 1; k >= 0 && byAfter[k].after > from; k-- {
			if byAfter[k].before > from {
				in += byAfter[k].n
			}
		}
		require.LessOrEqual(t, in, most, "events admitted in (%d, %d]", from, a.after)
	}
}

// benchKeys and runAllow are the harness's keys and row, for the benchmarks
// of this package that measure something else (Allow during eviction).
func benchKeys(n int) []string { return hotpath.Keys(n) }

func runAllow(b *testing.B, lim hotpath.Allower, keys []string, mode string) {
	hotpath.RunRow(b, lim, keys, mode == "parallel")
}

// textLogger logs to buf in slog's text form without times, so that a test
// can compare the lines whole.
func textLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// parseLimit is Limit.UnmarshalText of text, returning the Limit.
func parseLimit(text string) (keylimit.Limit, error) {
	var l keylimit.Limit
	err := l.UnmarshalText([]byte(text))
	return l, err
}
