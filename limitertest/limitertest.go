// Package limitertest is the behaviour suite every keylimit.Limiter passes:
// the in-memory TokenBucket, FixedWindow, SlidingWindow and SlidingCounter
// (as an approximate limiter, see Harness.Approximate), and the Redis
// limiters of the redislimit module. One table, run against every
// implementation, so that they cannot drift apart.
//
// A test file calls Run with a Harness that builds the limiter under test:
//
//	func TestBehaviour(t *testing.T) {
//		limitertest.Run(t, limitertest.Harness{
//			New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) { ... },
//			Advance: mock.Add,
//		})
//	}
//
// The suite uses limits whose Burst is Events, so a quota means the same to a
// bucket and to a window: Events at once, then refusals until time passes.
// Its SetLimit case runs on limiters with a SetLimit(keylimit.Limit) error
// method, its Refund case on keylimit.Refunder[string]s, and its cases that
// step the clock on harnesses with Advance; each is skipped for the others.
//
// A Harness with Concurrency instead of New runs the suite of a
// keylimit.ConcurrencyLimiter (the in-memory keylimit.Concurrency, and one
// on Redis): slots held and given back once, first come first served
// waiting, SetLimit, the longest hold.
//
// RunMatrix is the composition matrix: every composition of limiters (All,
// keys under limits of their own, Penalty, quota's charge by outcome,
// calendar periods, concurrency, leases, the store's failures) over every
// store a Harness describes (in memory; redis-server and a Redis Cluster in
// redislimit's tests, miniredis in its fleet demo module's), each cell played by 64 goroutines on a
// moving clock and checked exactly after every round. It runs a short form
// by default; the test flag -matrix.full, or KEYLIMIT_MATRIX=full in the
// environment, runs all of it.
package limitertest

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
)

// Harness describes an implementation to the suites: to Run, a rate
// limiter by New, or a concurrency limiter by Concurrency (Run runs the
// suite of each one set); to RunMatrix, a store: how to build each
// feature's limiters there (Limiter, Leased, Penalty, Concurrency, Faults),
// and how to move their time (Now, Advance). The limiters a store builds
// are closed by the matrix when they are io.Closers. A nil feature is one
// the store does not have: its cells are left out, and the test log says
// so.
type Harness struct {
	// New returns a new limiter of l on string keys, or the constructor's
	// error for an invalid l. If the limiter is an io.Closer, the suite
	// closes it when the test ends.
	New func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error)

	// Concurrency returns a new limiter of n slots per key on string keys
	// that takes slots held longer than maxHold back (never, if maxHold is
	// 0), or the constructor's error for an invalid n or maxHold. If the
	// limiter is an io.Closer, the suite closes it when the test ends. The
	// suite needs the keylimit.ConcurrencyLimiter methods, and Stats (for
	// Stats.Waiting, to know that a waiter has queued before the next
	// comes); its SetLimit case runs on limiters with a SetLimit(int) error
	// method, and is skipped for the others.
	Concurrency func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error)

	// Name names a store in its cells: "memory", "redis-server".
	Name string

	// Now reads the time of every limiter a store builds, the time Redis
	// or its scripts decide on included. RunMatrix needs it, and Advance:
	// every cell runs on a clock that moves.
	Now func() time.Time

	// Limiter returns a new limiter of a store, of kind ("bucket", "fixed"
	// or "sliding": a TokenBucket, FixedWindow or SlidingWindow) under l,
	// or, if perKey is not nil, under perKey(key) for each key. RunMatrix
	// needs it.
	Limiter func(t *testing.T, kind string, l keylimit.Limit, perKey func(key string) keylimit.Limit) (keylimit.Limiter[string], error)

	// Leased returns instances limiters of a store, of kind ("bucket" or
	// "fixed") under l, that count together, io.Closers: all but the last
	// take their events in leases, and Close gives back what those hold;
	// the last takes none.
	Leased func(t *testing.T, kind string, l keylimit.Limit, instances int) ([]keylimit.Limiter[string], error)

	// Penalty returns a Penalty of a store that bans by b the keys inner
	// refuses.
	Penalty func(t *testing.T, inner keylimit.Limiter[string], b keylimit.Ban) (keylimit.Limiter[string], error)

	// Faults returns a FixedWindow of a store, of l, that fails closed,
	// with a failure backoff shorter than l.Period, and a function that
	// makes its calls fail from then on by fault: "timeout" (a call fails
	// as one that outlasts its deadline does: its error wraps
	// context.DeadlineExceeded), "script error" (the store answers the
	// script with an error), or "" (they no longer fail).
	Faults func(t *testing.T, l keylimit.Limit) (keylimit.ContextLimiter[string], func(fault string), error)

	// Advance moves the clock of every limiter New, Concurrency or a
	// store's other fields returned by d; a negative d steps it back. Nil means the limiters run on a
	// clock the test cannot move (Redis server time): the suite then skips
	// the cases that step the clock (of a concurrency limiter: those of
	// the longest hold, which wait it out), and checks refill by sleeping
	// instead.
	Advance func(d time.Duration)

	// Attempts is how many calls each contention case makes in all
	// (default 30,000; for a concurrency limiter, acquisitions, default
	// 20,000): a third of a rate limiter's are admitted, so that admissions
	// race for a long stretch. A limiter behind a network round trip may
	// want fewer; an in-memory one can afford a million.
	Attempts int

	// MaxEvents is the largest Events the limiter takes, if it has such a
	// cap (keylimit.MaxSlidingWindowEvents for a SlidingWindow): the
	// contention cases use no larger quota. 0 means no cap.
	MaxEvents int

	// Approximate declares a limiter that estimates the sliding window
	// from the counts of two aligned windows (keylimit.SlidingCounter): the
	// events of a window keep weighing on its whole successor, so a key may
	// wait up to two Periods for room, and its quota is whole again two
	// Periods after its last admission, not one. It relaxes exactly that:
	// the upper bounds on RetryAfter and ResetAfter, and the wait in
	// RefillAfterPeriod. Every other check stays as it is for exact
	// limiters: admission counts, Remaining, and RetryAfter to the
	// nanosecond. Exact limiters leave it false.
	Approximate bool
}

// resetPeriods is how many Periods a key of h's limiter may wait for room,
// and after its last admission is back to its full quota.
func (h Harness) resetPeriods() time.Duration {
	if h.Approximate {
		return 2
	}
	return 1
}

// Run runs every case of the suite as a subtest of t: of the rate
// limiters New returns, and of the concurrency limiters Concurrency
// returns, for each that is set.
func Run(t *testing.T, h Harness) {
	if h.New == nil && h.Concurrency == nil {
		t.Fatal("limitertest: Harness.New and Harness.Concurrency are nil")
	}
	if h.Concurrency != nil {
		runConcurrency(t, h)
	}
	if h.New == nil {
		return
	}
	if h.Attempts == 0 {
		h.Attempts = 30_000
	}
	runCases(t, cases, h, h.Advance != nil)
}

// suiteCase is one case of a suite on harnesses of type H.
type suiteCase[H any] struct {
	name       string
	needsClock bool // it steps the limiter's clock
	run        func(t *testing.T, h H)
}

// runCases runs cases on h as subtests of t; those that step the clock are
// skipped unless canStep.
func runCases[H any](t *testing.T, cases []suiteCase[H], h H, canStep bool) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.needsClock && !canStep {
				t.Skip("limitertest: this case steps the limiter's clock, and the harness's Advance is nil (a clock the test cannot move)")
			}
			c.run(t, h)
		})
	}
}

var cases = []suiteCase[Harness]{
	{"FreshKeyAdmitsQuotaThenRefuses", false, freshKeyAdmitsQuota},
	{"AllowNIsAllOrNothing", false, allowNAllOrNothing},
	{"ImpossibleAndEmptyRequests", false, impossibleRequests},
	{"PeekConsumesNothing", false, peekConsumesNothing},
	{"ResetForgetsOnlyThatKey", false, resetForgets},
	{"ResetUnderContention", false, resetUnderContention},
	{"InvalidLimitsAreErrors", false, invalidLimits},
	{"ExactUnderContention", false, exactUnderContention},
	{"ExactUnderContentionMixedN", false, exactUnderContentionMixedN},
	{"RefundGivesBack", false, refundGivesBack},
	{"LateRefundGivesNothing", false, lateRefundGivesNothing},
	{"PartialRefund", false, partialRefund},
	{"RefundOnce", false, refundOnce},
	{"RefillAfterPeriod", false, refillAfterPeriod},
	{"RetryAfterIsExact", true, retryAfterIsExact},
	{"RefillAfterIsWhenMoreFits", true, refillAfterIsWhenMoreFits},
	{"ClockSteppingBackCreatesNothing", true, clockStepsBack},
	{"SetLimitKeepsWhatWasUsed", false, setLimitKeepsWhatWasUsed},
}

// limitSetter is a limiter whose limit can change while it runs: every
// in-memory limiter of keylimit. The suite's SetLimit case runs on the
// limiters that have this method, and is skipped for the others.
type limitSetter interface {
	SetLimit(keylimit.Limit) error
}

// hour is a period long enough that real time passing during a test does
// not change a decision.
var hour = keylimit.PerHour(10)

func newLimiter(t *testing.T, h Harness, l keylimit.Limit) keylimit.Limiter[string] {
	t.Helper()
	lim, err := h.New(t, l)
	if err != nil {
		t.Fatalf("New(%v): %v", l, err)
	}
	if c, ok := lim.(io.Closer); ok {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	return lim
}

// key returns a key unique to the test, so that limiters sharing a store
// (Redis) never see another test's state.
func key(t *testing.T, name string) string {
	return fmt.Sprintf("%s/%s/%d", t.Name(), name, time.Now().UnixNano())
}

func expect(t *testing.T, what string, got, want any) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func freshKeyAdmitsQuota(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	k := key(t, "k")
	for i := range 10 {
		r := lim.Take(k, 1)
		if !r.Allowed || r.Limit != 10 || r.Remaining != 9-i || r.RetryAfter != 0 {
			t.Fatalf("request %d: %+v, want allowed with Limit 10, Remaining %d, RetryAfter 0", i+1, r, 9-i)
		}
		if most := h.resetPeriods() * time.Hour; r.ResetAfter <= 0 || r.ResetAfter > most {
			t.Fatalf("request %d: ResetAfter %v, want in (0, %v]", i+1, r.ResetAfter, most)
		}
	}
	for i := range 5 {
		r := lim.Take(k, 1)
		if r.Allowed || r.Limit != 10 || r.Remaining != 0 {
			t.Fatalf("request %d: %+v, want refused with Limit 10, Remaining 0", 11+i, r)
		}
		if most := h.resetPeriods() * time.Hour; r.RetryAfter <= 0 || r.RetryAfter > most {
			t.Fatalf("request %d: RetryAfter %v, want in (0, %v]", 11+i, r.RetryAfter, most)
		}
	}
	expect(t, "Allow after the quota", lim.Allow(k), false)
}

func allowNAllOrNothing(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	k := key(t, "k")
	expect(t, "AllowN(9)", lim.AllowN(k, 9), true)
	expect(t, "AllowN(2) with 1 left", lim.AllowN(k, 2), false)
	expect(t, "Remaining after a refused AllowN(2)", lim.Peek(k).Remaining, 1)
	r := lim.Take(k, 1)
	expect(t, "Take(1) with 1 left", r.Allowed, true)
	expect(t, "Remaining", r.Remaining, 0)
	expect(t, "Allow when empty", lim.Allow(k), false)
}

func impossibleRequests(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	k := key(t, "k")
	for _, n := range []int{11, 1000, -1} {
		r := lim.Take(k, n)
		if r.Allowed || r.RetryAfter != keylimit.InfDuration {
			t.Fatalf("Take(%d) on a quota of 10 = %+v, want refused with RetryAfter InfDuration", n, r)
		}
		expect(t, fmt.Sprintf("AllowN(%d)", n), lim.AllowN(k, n), false)
	}
	r := lim.Take(k, 0)
	expect(t, "Take(0).Allowed", r.Allowed, true)
	expect(t, "Take(0).Remaining", r.Remaining, 10)
	expect(t, "AllowN(10) after impossible requests", lim.AllowN(k, 10), true)
}

func peekConsumesNothing(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	k := key(t, "k")
	r := lim.Peek(k)
	if !r.Allowed || r.Remaining != 10 || r.Limit != 10 || r.RetryAfter != 0 || r.ResetAfter != 0 {
		t.Fatalf("Peek of a new key = %+v, want allowed, Limit 10, Remaining 10, no waits", r)
	}
	lim.AllowN(k, 7)
	for range 5 {
		expect(t, "Peek().Remaining", lim.Peek(k).Remaining, 3)
	}
	lim.AllowN(k, 3)
	r = lim.Peek(k)
	if r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
		t.Fatalf("Peek of an empty key = %+v, want refused, Remaining 0, RetryAfter > 0", r)
	}
}

func resetForgets(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	a, b := key(t, "a"), key(t, "b")
	expect(t, "AllowN(a, 10)", lim.AllowN(a, 10), true)
	expect(t, "AllowN(b, 10)", lim.AllowN(b, 10), true)
	if keys, ok := keysOf(lim); ok {
		expect(t, "Len with two keys", keys, 2)
	}
	lim.Reset(a)
	lim.Reset(key(t, "never-seen"))
	if keys, ok := keysOf(lim); ok {
		expect(t, "Len after Reset of one key and of a key never seen", keys, 1)
	}
	expect(t, "Peek(a).Remaining after Reset", lim.Peek(a).Remaining, 10)
	expect(t, "AllowN(a, 10) after Reset", lim.AllowN(a, 10), true)
	expect(t, "Allow(b): b keeps its state", lim.Allow(b), false)
}

// resetUnderContention: Resets racing with admissions on one key. Each
// admission lands wholly before a reset (and is forgotten) or after it, so
// after a last Reset the key admits exactly its quota, and is one key.
func resetUnderContention(t *testing.T, h Harness) {
	lim := newLimiter(t, h, keylimit.PerHour(100))
	k := key(t, "k")
	var wg sync.WaitGroup
	var stop atomic.Bool
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				lim.Allow(k)
			}
		})
	}
	for range 1000 {
		lim.Reset(k)
	}
	stop.Store(true)
	wg.Wait()
	lim.Reset(k)
	n := 0
	for lim.Allow(k) {
		n++
	}
	expect(t, "admitted after the last Reset", n, 100)
	if keys, ok := keysOf(lim); ok {
		expect(t, "Len", keys, 1)
	}
}

func invalidLimits(t *testing.T, h Harness) {
	for _, l := range []keylimit.Limit{
		{},
		keylimit.Per(0, time.Second),
		keylimit.Per(-5, time.Second),
		keylimit.Per(5, 0),
		keylimit.Per(5, -time.Second),
		keylimit.PerSecond(5).WithBurst(0),
		keylimit.PerSecond(5).WithBurst(-1),
	} {
		lim, err := h.New(t, l)
		if err == nil {
			if c, ok := lim.(io.Closer); ok {
				c.Close()
			}
			t.Fatalf("New(%#v) returned no error", l)
		}
		if !strings.HasPrefix(err.Error(), "keylimit") {
			t.Fatalf("New(%#v): error %q does not say it comes from keylimit", l, err)
		}
		if lim != nil && !reflect.ValueOf(lim).IsNil() {
			t.Fatalf("New(%#v) returned a limiter with its error", l)
		}
	}
}

// quota returns the contention cases' quota: a share of the attempts,
// rounded down to a multiple of unit, at most h.MaxEvents.
func (h Harness) quota(share, unit int) int {
	q := h.Attempts / share
	if h.MaxEvents > 0 {
		q = min(q, h.MaxEvents)
	}
	return max(q/unit*unit, unit)
}

// exactUnderContention: many goroutines on one key admit exactly the quota,
// and leave nothing. The quota is a third of the attempts, so that
// admissions race for a long stretch, not only for the first few
// microseconds: a lost update shows.
func exactUnderContention(t *testing.T, h Harness) {
	quota := h.quota(3, 1)
	lim := newLimiter(t, h, keylimit.PerHour(quota))
	k := key(t, "hot")
	const goroutines = 100
	per := max(h.Attempts/goroutines, 10)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range per {
				if lim.Allow(k) {
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	expect(t, fmt.Sprintf("admitted of %d attempts", goroutines*per), admitted.Load(), int64(quota))
	expect(t, "Peek().Remaining after the contention", lim.Peek(k).Remaining, 0)
}

// exactUnderContentionMixedN: goroutines ask for 1, 2 and 3 events at once
// on one key: the events admitted add up to the quota (a multiple of 6, so
// that every mix fits), less at most 2 that no request of 3 fits, and Peek
// reports exactly what is left.
func exactUnderContentionMixedN(t *testing.T, h Harness) {
	quota := h.quota(5, 6)
	lim := newLimiter(t, h, keylimit.PerHour(quota))
	k := key(t, "hot")
	var taken atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 30 {
		n := g%3 + 1
		wg.Go(func() {
			<-start
			for range quota / 6 {
				if lim.AllowN(k, n) {
					taken.Add(int64(n))
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := int(taken.Load()); got > quota || got <= quota-3 {
		t.Fatalf("events admitted = %d, want in (%d, %d]: at most 2 can be left that no request of 3 fits", got, quota-3, quota)
	}
	expect(t, "Peek().Remaining after the contention", lim.Peek(k).Remaining, quota-int(taken.Load()))
}

// refundGivesBack: Refund gives back what an admission took, and creates no
// key. With no time passing,
// every type agrees (a bucket gives back tokens, a window events of its
// current window).
// partialRefund: a copy of an Admission with N lowered gives back that
// many of its events, no more (keylimit.Refunder): what quota's policies
// charged by outcome give back of a request whose outcome charged part.
func partialRefund(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	refunder, ok := lim.(keylimit.Refunder[string])
	if !ok {
		t.Fatalf("limitertest: %T is not a keylimit.Refunder (Admit and Refund methods)", lim)
	}
	k := key(t, "k")
	_, a := refunder.Admit(k, 7)
	part := a
	part.N = 3
	refunder.Refund(k, part)
	expect(t, "Peek().Remaining after admitting 7 of 10 and refunding 3 of them", lim.Peek(k).Remaining, 6)
	r, _ := refunder.Admit(k, 6)
	expect(t, "Admit(6) with 6 left: Allowed", r.Allowed, true)
	expect(t, "Admit(6) with 6 left: Remaining", r.Remaining, 0)
}

// refundOnce: an Admission gives back at most what it took, once, however
// many copies of it are refunded, at once or in turn, and whatever N a copy
// carries (keylimit.Refunder).
func refundOnce(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	refunder, ok := lim.(keylimit.Refunder[string])
	if !ok {
		t.Fatalf("limitertest: %T is not a keylimit.Refunder (Admit and Refund methods)", lim)
	}
	k := key(t, "twice")
	_, a := refunder.Admit(k, 3)
	_, b := refunder.Admit(k, 4)
	refunder.Refund(k, a)
	refunder.Refund(k, a)
	part := a
	part.N = 1
	refunder.Refund(k, part)
	expect(t, "Peek().Remaining after admitting 3 and 4 and refunding the 3 twice, and a copy", lim.Peek(k).Remaining, 6)
	refunder.Refund(k, b)
	refunder.Refund(k, b)
	expect(t, "Peek().Remaining after refunding the 4 twice", lim.Peek(k).Remaining, 10)

	k = key(t, "partial-first")
	_, a = refunder.Admit(k, 5)
	part = a
	part.N = 2
	refunder.Refund(k, part)
	refunder.Refund(k, a)
	expect(t, "Peek().Remaining after admitting 5, refunding 2 of them, then all 5", lim.Peek(k).Remaining, 7)

	k = key(t, "raised")
	_, a = refunder.Admit(k, 7)
	lim.Allow(k)
	a.N = 9
	refunder.Refund(k, a)
	expect(t, "Peek().Remaining after admitting 7 and 1 and refunding the 7 with N raised to 9", lim.Peek(k).Remaining, 9)

	k = key(t, "copies")
	_, a = refunder.Admit(k, 3)
	refunder.Admit(k, 4)
	var wg sync.WaitGroup
	for range 64 {
		c := a
		wg.Go(func() { refunder.Refund(k, c) })
	}
	wg.Wait()
	expect(t, "Peek().Remaining after 64 goroutines refunded copies of the 3 at once", lim.Peek(k).Remaining, 6)
}

func refundGivesBack(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	refunder, ok := lim.(keylimit.Refunder[string])
	if !ok {
		t.Fatalf("limitertest: %T is not a keylimit.Refunder (Admit and Refund methods)", lim)
	}
	k, never := key(t, "k"), key(t, "never-seen")
	r, a := refunder.Admit(k, 7)
	expect(t, "Admit(7) of 10: Allowed", r.Allowed, true)
	expect(t, "Admit(7) of 10: Admission.N", a.N, 7)
	expect(t, "Admit(7) of 10: Remaining", r.Remaining, 3)
	refunder.Refund(k, a)
	expect(t, "Peek().Remaining after the refund of 7", lim.Peek(k).Remaining, 10)

	_, a3 := refunder.Admit(k, 3)
	_, a4 := refunder.Admit(k, 4)
	refunder.Refund(k, a3)
	expect(t, "Peek().Remaining after admitting 3 and 4 and refunding the 3", lim.Peek(k).Remaining, 6)
	r, refused := refunder.Admit(k, 7)
	expect(t, "Admit(7) with 6 left: Allowed", r.Allowed, false)
	expect(t, "Admit(7) with 6 left: its Admission", refused, keylimit.Admission{})
	refunder.Refund(k, refused)
	refunder.Refund(k, keylimit.Admission{})
	expect(t, "Peek().Remaining after refunding empty admissions", lim.Peek(k).Remaining, 6)
	// Another limiter's Admission is not this one's to give back (two Redis
	// limiters of one limit may share the key's count: then the other's
	// admission shows here too, and still is not refunded).
	other := newLimiter(t, h, hour).(keylimit.Refunder[string])
	_, theirs := other.Admit(k, 4)
	before := lim.Peek(k).Remaining
	refunder.Refund(k, theirs)
	expect(t, "Peek().Remaining after refunding another limiter's admission", lim.Peek(k).Remaining, before)
	other.Refund(k, theirs)
	refunder.Refund(k, a4)
	expect(t, "Peek().Remaining after refunding the 4", lim.Peek(k).Remaining, 10)

	refunder.Refund(never, a3)
	expect(t, "Peek(a key never seen).Remaining after a refund", lim.Peek(never).Remaining, 10)
	if keys, ok := keysOf(lim); ok {
		expect(t, "Len: Refund creates no key", keys, 1)
	}
}

// lateRefundGivesNothing: a refund that comes after its events have stopped
// counting (their window ended, their log entries left the window, their
// tokens refilled) gives back nothing, so the capacity that later requests
// used stays used. It is the attack on All: limiter B of All(A, B) is slow
// to refuse, A's quota renews meanwhile, another request takes it, and then
// All refunds A's first admission. Without an exact refund, a third request
// would pass: two admissions in one window of a limit of 1.
func lateRefundGivesNothing(t *testing.T, h Harness) {
	period := time.Hour
	if h.Advance == nil {
		period = 500 * time.Millisecond
	}
	a := newLimiter(t, h, keylimit.Per(1, period))
	k := key(t, "k")
	wait := h.resetPeriods() * period
	if h.Advance == nil {
		// On a real clock, start just after a window boundary (windows
		// align to the Unix epoch), and wait whole periods: every call
		// below then lands early in its window, far from the next boundary.
		since := time.Duration(time.Now().UnixNano()) % period
		time.Sleep(period - since + 20*time.Millisecond)
	}
	others := 0
	slow := &slowRefuser{wait: func() {
		if h.Advance != nil {
			h.Advance(wait)
		} else {
			time.Sleep(wait)
		}
		// A's quota has renewed: another request takes it.
		if a.Allow(k) {
			others++
		}
	}}
	both := keylimit.All(a, slow)
	expect(t, "All(A, slow B).Allow: B refuses", both.Allow(k), false)
	expect(t, "requests A admitted while B was deciding", others, 1)
	expect(t, "A.Allow after the late refund: the window's one event is the other request's", a.Allow(k), false)
	expect(t, "A.Peek().Remaining after the late refund", a.Peek(k).Remaining, 0)
}

// slowRefuser is a limiter that takes a while to refuse everything.
type slowRefuser struct{ wait func() }

func (s *slowRefuser) Allow(string) bool { return false }
func (s *slowRefuser) AllowN(string, int) bool {
	return false
}

func (s *slowRefuser) Take(key string, n int) keylimit.Result {
	s.wait()
	return keylimit.Result{Limit: 1, RetryAfter: time.Second}
}
func (s *slowRefuser) Peek(string) keylimit.Result {
	return keylimit.Result{Limit: 1, RetryAfter: time.Second}
}
func (s *slowRefuser) Reset(string) {}

// refillAfterPeriod: once a whole Period has passed since the last
// admission, the full quota is back, for a bucket and a window alike (two
// Periods for an approximate limiter).
// refillAfterIsWhenMoreFits checks Result.RefillAfter, the draft's t: 0 for
// a whole quota; else 1 ns before it the key has no more quota than the
// Result said, and at it, more. On a key drained in two steps (a refusal:
// RefillAfter at most RetryAfter), and one with quota left.
func refillAfterIsWhenMoreFits(t *testing.T, h Harness) {
	l := keylimit.PerMinute(10)
	lim := newLimiter(t, h, l)
	expect(t, "RefillAfter of a new key", lim.Peek(key(t, "new")).RefillAfter, time.Duration(0))

	drained := key(t, "drained")
	lim.Take(drained, 3)
	h.Advance(20 * time.Second)
	// 7 fit a window now, and a bucket's 3 are back: take all there is.
	for i := 0; lim.Allow(drained); i++ {
		if i == 10 {
			t.Fatalf("10 events admitted 20 s after 3, of %v", l)
		}
	}
	r := lim.Take(drained, 1)
	expect(t, "Take(1) when drained", r.Allowed, false)
	if r.RefillAfter <= 0 || r.RefillAfter > r.RetryAfter {
		t.Fatalf("refused with %v: RefillAfter is not in (0, RetryAfter]", r)
	}
	moreAfter(t, h, lim, drained, r)
	expect(t, "Allow at RefillAfter", lim.Allow(drained), true)

	left := key(t, "left")
	r = lim.Take(left, 3)
	if r.RefillAfter <= 0 || r.RefillAfter > h.resetPeriods()*l.Period {
		t.Fatalf("admitted with %v: RefillAfter is not in (0, %v]", r, h.resetPeriods()*l.Period)
	}
	moreAfter(t, h, lim, left, r)
}

// moreAfter checks that key, whose Result was r just now, has r.Remaining
// 1 ns before r.RefillAfter, and more at it; the clock is left there.
func moreAfter(t *testing.T, h Harness, lim keylimit.Limiter[string], key string, r keylimit.Result) {
	t.Helper()
	h.Advance(r.RefillAfter - time.Nanosecond)
	expect(t, fmt.Sprintf("Remaining 1 ns before RefillAfter %v", r.RefillAfter), lim.Peek(key).Remaining, r.Remaining)
	h.Advance(time.Nanosecond)
	if p := lim.Peek(key); p.Remaining <= r.Remaining {
		t.Fatalf("at RefillAfter %v of %v: %v, no more", r.RefillAfter, r, p)
	}
}

func refillAfterPeriod(t *testing.T, h Harness) {
	l := keylimit.Per(5, time.Hour)
	if h.Advance == nil {
		l = keylimit.Per(5, 500*time.Millisecond)
	}
	lim := newLimiter(t, h, l)
	k := key(t, "k")
	if h.Advance == nil {
		// On a real clock, start just after a window boundary (windows
		// align to the Unix epoch), so that no boundary falls between the
		// admissions and the refusal below and reopens a fixed window.
		since := time.Duration(time.Now().UnixNano()) % l.Period
		time.Sleep(l.Period - since + 20*time.Millisecond)
	}
	expect(t, "AllowN(5)", lim.AllowN(k, 5), true)
	expect(t, "Allow when empty", lim.Allow(k), false)
	wait := h.resetPeriods() * l.Period
	if h.Advance != nil {
		h.Advance(wait)
	} else {
		time.Sleep(wait + 50*time.Millisecond)
	}
	r := lim.Peek(k)
	if !r.Allowed || r.Remaining != 5 || r.ResetAfter != 0 {
		t.Fatalf("Peek %v later = %+v, want allowed, Remaining 5, ResetAfter 0", wait, r)
	}
	expect(t, fmt.Sprintf("AllowN(5) %v later", wait), lim.AllowN(k, 5), true)
}

// retryAfterIsExact: RetryAfter is the least wait: 1 ns less is refused,
// exactly RetryAfter passes.
func retryAfterIsExact(t *testing.T, h Harness) {
	lim := newLimiter(t, h, keylimit.Per(3, time.Minute))
	k := key(t, "k")
	h.Advance(7 * time.Second) // not on any boundary
	expect(t, "AllowN(3)", lim.AllowN(k, 3), true)
	h.Advance(5 * time.Second)
	for round := range 3 {
		r := lim.Take(k, 1)
		if most := h.resetPeriods() * time.Minute; r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > most {
			t.Fatalf("round %d: Take when empty = %+v, want refused with RetryAfter in (0, %v]", round, r, most)
		}
		h.Advance(r.RetryAfter - time.Nanosecond)
		if r2 := lim.Take(k, 1); r2.Allowed {
			t.Fatalf("round %d: admitted 1 ns before RetryAfter %v", round, r.RetryAfter)
		}
		h.Advance(time.Nanosecond)
		if r2 := lim.Take(k, 1); !r2.Allowed {
			t.Fatalf("round %d: refused after waiting RetryAfter %v: %+v", round, r.RetryAfter, r2)
		}
		// Drain what else came back: nothing for a bucket, whose tokens
		// return one at a time, up to 2 more for a window, whose events
		// leave it together.
		for drained := 0; lim.Allow(k); drained++ {
			if drained == 2 {
				t.Fatalf("round %d: more than the quota of 3 came back after RetryAfter", round)
			}
		}
	}
}

// clockStepsBack: a clock that steps back creates no capacity and panics
// nowhere, not even a thousand years back or forth, beyond the reach of
// int64 nanoseconds from the limiter's creation; when it comes forward again
// the key is where it was.
func clockStepsBack(t *testing.T, h Harness) {
	lim := newLimiter(t, h, keylimit.Per(4, time.Minute))
	k := key(t, "k")
	h.Advance(90 * time.Second)
	expect(t, "AllowN(4)", lim.AllowN(k, 4), true)
	before := lim.Peek(k)
	for _, back := range []time.Duration{time.Second, 30 * time.Second, time.Minute, 10 * time.Minute} {
		h.Advance(-back)
		expect(t, fmt.Sprintf("Allow with the clock %v back", back), lim.Allow(k), false)
		if r := lim.Peek(k); r.Remaining != 0 {
			t.Fatalf("Peek with the clock %v back = %+v, want Remaining 0", back, r)
		}
		h.Advance(back)
		expect(t, "Allow with the clock forward again", lim.Allow(k), false)
	}
	// A thousand years, in steps a time.Duration holds.
	const century = 100 * 365 * 24 * time.Hour
	far := func(sign time.Duration) {
		for range 10 {
			h.Advance(sign * century)
		}
	}
	far(-1)
	expect(t, "Allow a thousand years back", lim.Allow(k), false)
	far(1)
	expect(t, "Allow back from a thousand years back", lim.Allow(k), false)
	after := lim.Peek(k)
	expect(t, "RetryAfter after the clock went back and forth", after.RetryAfter, before.RetryAfter)
	h.Advance(after.RetryAfter)
	expect(t, "Allow after RetryAfter", lim.Allow(k), true)
	far(1)
	expect(t, "AllowN(4) a thousand years on", lim.AllowN(k, 4), true)
	expect(t, "Allow a thousand years on, the quota used", lim.Allow(k), false)
}

// setLimitKeepsWhatWasUsed: after SetLimit, a key keeps what it used: a
// raised limit gives it the difference at once, a lowered one refuses it,
// and flipping the limit back and forth reopens nothing. An invalid limit
// is an error that changes nothing. Every type keeps the key's use in its
// own way (a bucket its debt in tokens, a window its count); within one
// Period, with no time passing, they all agree.
func setLimitKeepsWhatWasUsed(t *testing.T, h Harness) {
	lim := newLimiter(t, h, hour)
	setter, ok := lim.(limitSetter)
	if !ok {
		t.Skipf("limitertest: %T has no SetLimit(keylimit.Limit) error method", lim)
	}
	set := func(l keylimit.Limit) {
		t.Helper()
		if err := setter.SetLimit(l); err != nil {
			t.Fatalf("SetLimit(%v): %v", l, err)
		}
	}
	k := key(t, "k")
	expect(t, "AllowN(6) of 10", lim.AllowN(k, 6), true)

	set(keylimit.PerHour(20))
	if l, ok := lim.(interface{ Limit() keylimit.Limit }); ok {
		expect(t, "Limit() after SetLimit", l.Limit(), keylimit.PerHour(20))
	}
	r := lim.Peek(k)
	if !r.Allowed || r.Limit != 20 || r.Remaining != 14 {
		t.Fatalf("Peek after raising 10 to 20 with 6 used = %+v, want allowed, Limit 20, Remaining 14", r)
	}
	expect(t, "AllowN(14) after the raise", lim.AllowN(k, 14), true)
	expect(t, "Allow with 20 of 20 used", lim.Allow(k), false)
	expect(t, "Peek(new key).Remaining", lim.Peek(key(t, "new")).Remaining, 20)

	for round := range 3 {
		set(keylimit.PerHour(5))
		r = lim.Take(k, 1)
		if r.Allowed || r.Limit != 5 || r.Remaining != 0 || r.RetryAfter <= 0 || r.Untracked || r.Err != nil {
			t.Fatalf("round %d: Take after lowering to 5 with 20 used = %+v, want refused, Limit 5, Remaining 0, RetryAfter > 0, tracked, no error", round, r)
		}
		set(keylimit.PerHour(20))
		expect(t, fmt.Sprintf("round %d: Allow back at 20 with 20 used", round), lim.Allow(k), false)
	}

	err := setter.SetLimit(keylimit.PerHour(0))
	if err == nil || !strings.HasPrefix(err.Error(), "keylimit") {
		t.Fatalf("SetLimit(PerHour(0)) = %v, want an error from keylimit", err)
	}
	expect(t, "Peek(new key).Limit after an invalid SetLimit", lim.Peek(key(t, "new2")).Limit, 20)
	if l, ok := lim.(interface{ Limit() keylimit.Limit }); ok {
		expect(t, "Limit() after an invalid SetLimit", l.Limit(), keylimit.PerHour(20))
	}
	expect(t, "Allow after an invalid SetLimit", lim.Allow(k), false)

	// Once the key has waited out what it used under the limit it is
	// under, the whole new quota is back, and no more.
	if h.Advance != nil {
		h.Advance(h.resetPeriods() * time.Hour)
		expect(t, "AllowN(20) once what was used is gone", lim.AllowN(k, 20), true)
		expect(t, "Allow with 20 of 20 used again", lim.Allow(k), false)
	}
}

// keysOf returns the number of keys lim tracks in process (Stats().Keys),
// if it tracks them there: a remote limiter's keys are in its store.
func keysOf(lim any) (int, bool) {
	s, ok := lim.(interface{ Stats() keylimit.Stats })
	if !ok {
		return 0, false
	}
	st := s.Stats()
	return st.Keys, !st.Remote
}
