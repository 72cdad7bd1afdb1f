package limitertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
)

// concurrencyHarness is what the concurrency suite needs of a Harness:
// Harness.Concurrency as New, Advance and Attempts.
type concurrencyHarness struct {
	New      func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error)
	Advance  func(d time.Duration)
	Attempts int
}

// runConcurrency runs every case of the concurrency suite on h's
// Concurrency as a subtest of t.
func runConcurrency(t *testing.T, h Harness) {
	c := concurrencyHarness{New: h.Concurrency, Advance: h.Advance, Attempts: h.Attempts}
	if c.Attempts == 0 {
		c.Attempts = 20_000
	}
	runCases(t, concurrencyCases, c, c.Advance != nil)
}

var concurrencyCases = []suiteCase[concurrencyHarness]{
	{"FreshKeyHoldsNThenRefuses", false, freshKeyHoldsN},
	{"ReleaseGivesBackOnce", false, releaseGivesBackOnce},
	{"TryAcquireIsAllOrNothing", false, tryAcquireAllOrNothing},
	{"ImpossibleAndEmptyRequests", false, impossibleAcquisitions},
	{"PeekHoldsNothing", false, peekHoldsNothing},
	{"AcquireWaitsForARelease", false, acquireWaitsForARelease},
	{"WaitersAreServedInOrder", false, waitersServedInOrder},
	{"GivingUpMovesTheQueueUp", false, givingUpMovesTheQueueUp},
	{"NeverAboveNUnderContention", false, neverAboveN},
	{"SetLimitLowersAndRaises", false, setConcurrencyLimit},
	{"InvalidLimitsAreErrors", false, invalidConcurrencyLimits},
	{"LongestHoldTakesBack", true, longestHoldTakesBack},
	{"LongestHoldServesAWaiter", true, longestHoldServesAWaiter},
}

func newConcurrency(t *testing.T, h concurrencyHarness, n int, maxHold time.Duration) keylimit.ConcurrencyLimiter[string] {
	t.Helper()
	lim, err := h.New(t, n, maxHold)
	if err != nil {
		t.Fatalf("New(%d, %v): %v", n, maxHold, err)
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

// acquired checks that an acquisition was admitted with Remaining left.
func acquired(t *testing.T, what string, r keylimit.Result, limit, remaining int) {
	t.Helper()
	if !r.Allowed || r.Limit != limit || r.Remaining != remaining || r.RetryAfter != 0 {
		t.Fatalf("%s = %+v, want allowed with Limit %d, Remaining %d, RetryAfter 0", what, r, limit, remaining)
	}
}

// refusedNow checks that an acquisition was refused for now, with
// Remaining left and a RetryAfter that is an estimate: above 0 and finite.
func refusedNow(t *testing.T, what string, r keylimit.Result, limit, remaining int) {
	t.Helper()
	if r.Allowed || r.Limit != limit || r.Remaining != remaining || r.RetryAfter <= 0 || r.RetryAfter == keylimit.InfDuration {
		t.Fatalf("%s = %+v, want refused with Limit %d, Remaining %d, a finite RetryAfter > 0", what, r, limit, remaining)
	}
}

func freshKeyHoldsN(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 4, 0)
	k := key(t, "k")
	for i := range 4 {
		_, r := lim.TryAcquire(k, 1)
		acquired(t, fmt.Sprintf("TryAcquire %d of 4", i+1), r, 4, 3-i)
	}
	for i := range 3 {
		p, r := lim.TryAcquire(k, 1)
		refusedNow(t, fmt.Sprintf("TryAcquire %d of 4", 5+i), r, 4, 0)
		expect(t, "the refused acquisition's Permit", p, keylimit.Permit{})
	}
	refusedNow(t, "Peek of a full key", lim.Peek(k), 4, 0)
	_, r := lim.TryAcquire(key(t, "other"), 4)
	acquired(t, "TryAcquire(4) on another key", r, 4, 0)
}

// releaseGivesBackOnce: a Release gives back what its acquisition holds,
// once, whichever copy of the Permit it is called on; the zero Permit's
// gives back nothing, and neither does another key's.
func releaseGivesBackOnce(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 3, 0)
	k, other := key(t, "k"), key(t, "other")
	p, _ := lim.TryAcquire(k, 2)
	lim.TryAcquire(k, 1)
	q, _ := lim.TryAcquire(other, 3)
	copied := p
	p.Release()
	copied.Release()
	p.Release()
	keylimit.Permit{}.Release()
	expect(t, "Peek().Remaining after releasing 2 of 3 three times", lim.Peek(k).Remaining, 2)
	expect(t, "Peek(other).Remaining: another key's release frees none of it", lim.Peek(other).Remaining, 0)
	_, r := lim.TryAcquire(k, 3)
	refusedNow(t, "TryAcquire(3) with 2 free", r, 3, 2)
	again, r := lim.TryAcquire(k, 2)
	acquired(t, "TryAcquire(2) with 2 free", r, 3, 0)
	// The old permit's slots are held by the new acquisition now: its
	// Release must not give them back.
	p.Release()
	expect(t, "Peek().Remaining after a stale Release", lim.Peek(k).Remaining, 0)
	again.Release()
	q.Release()
	expect(t, "Peek().Remaining after releasing the 2", lim.Peek(k).Remaining, 2)
	expect(t, "Peek(other).Remaining after its release", lim.Peek(other).Remaining, 3)
}

func tryAcquireAllOrNothing(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 5, 0)
	k := key(t, "k")
	_, r := lim.TryAcquire(k, 3)
	acquired(t, "TryAcquire(3) of 5", r, 5, 2)
	_, r = lim.TryAcquire(k, 3)
	refusedNow(t, "TryAcquire(3) with 2 free", r, 5, 2)
	expect(t, "Peek().Remaining after a refused TryAcquire(3)", lim.Peek(k).Remaining, 2)
	_, r = lim.TryAcquire(k, 2)
	acquired(t, "TryAcquire(2) with 2 free", r, 5, 0)
}

func impossibleAcquisitions(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 3, 0)
	k := key(t, "k")
	for _, n := range []int{4, 1000, -1} {
		p, r := lim.TryAcquire(k, n)
		if r.Allowed || r.RetryAfter != keylimit.InfDuration || p != (keylimit.Permit{}) {
			t.Fatalf("TryAcquire(%d) of 3 = %+v, want refused with RetryAfter InfDuration and the zero Permit", n, r)
		}
		start := time.Now()
		_, err := lim.Acquire(context.Background(), k, n)
		if !errors.Is(err, keylimit.ErrExceedsLimit) || !strings.HasPrefix(err.Error(), "keylimit") {
			t.Fatalf("Acquire(%d) of 3 = %v, want an error from keylimit that wraps ErrExceedsLimit", n, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("Acquire(%d) of 3 took %v to fail: it must fail at once", n, d)
		}
	}
	p, r := lim.TryAcquire(k, 0)
	if !r.Allowed || r.Remaining != 3 || p != (keylimit.Permit{}) {
		t.Fatalf("TryAcquire(0) = %+v, %v, want allowed, Remaining 3, the zero Permit", r, p)
	}
	if p, err := lim.Acquire(context.Background(), k, 0); err != nil || p != (keylimit.Permit{}) {
		t.Fatalf("Acquire(0) = %v, %v, want the zero Permit and no error", p, err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lim.Acquire(ended, k, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire under an ended context = %v, want context.Canceled", err)
	}
	expect(t, "Peek().Remaining after impossible and empty requests", lim.Peek(k).Remaining, 3)
}

func peekHoldsNothing(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 2, 0)
	k := key(t, "k")
	r := lim.Peek(k)
	if !r.Allowed || r.Limit != 2 || r.Remaining != 2 || r.RetryAfter != 0 || r.ResetAfter != 0 {
		t.Fatalf("Peek of a new key = %+v, want allowed, Limit 2, Remaining 2, no waits", r)
	}
	if keys, ok := keysOf(lim); ok {
		expect(t, "Len after a Peek of a new key", keys, 0)
	}
	lim.TryAcquire(k, 1)
	for range 3 {
		expect(t, "Peek().Remaining", lim.Peek(k).Remaining, 1)
	}
	lim.TryAcquire(k, 1)
	refusedNow(t, "Peek of a full key", lim.Peek(k), 2, 0)
}

// stats returns lim's Stats method, which the suite needs to see waiters
// queue.
func stats(t *testing.T, lim keylimit.ConcurrencyLimiter[string]) func() keylimit.Stats {
	s, ok := lim.(interface{ Stats() keylimit.Stats })
	if !ok {
		t.Fatalf("limitertest: %T has no Stats method", lim)
	}
	return s.Stats
}

// waitUntil polls cond until it holds, and fails the test after 30 s of
// real time. It waits for other goroutines to reach a state; it asserts
// nothing about speed.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// acquisition is an Acquire running in its own goroutine.
type acquisition struct {
	done   chan struct{}
	permit keylimit.Permit
	err    error
}

// startAcquire calls lim.Acquire(ctx, key, n) in a goroutine, and waits
// until it has queued: until the limiter's Stats count waiting more
// Acquires than before.
func startAcquire(t *testing.T, lim keylimit.ConcurrencyLimiter[string], ctx context.Context, key string, n int) *acquisition {
	t.Helper()
	st := stats(t, lim)
	before := st().Waiting
	a := &acquisition{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.permit, a.err = lim.Acquire(ctx, key, n)
	}()
	waitUntil(t, fmt.Sprintf("Acquire(%d) queues", n), func() bool { return st().Waiting > before })
	return a
}

// finished reports whether a has returned.
func (a *acquisition) finished() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// await waits for a to return, and fails the test if it does not within 30
// s or returned an error.
func (a *acquisition) await(t *testing.T, what string) keylimit.Permit {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Acquire did not return", what)
	}
	if a.err != nil {
		t.Fatalf("%s: Acquire = %v", what, a.err)
	}
	return a.permit
}

func acquireWaitsForARelease(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 1, 0)
	k := key(t, "k")
	p, _ := lim.TryAcquire(k, 1)
	a := startAcquire(t, lim, context.Background(), k, 1)
	time.Sleep(20 * time.Millisecond)
	expect(t, "Acquire returned while the slot was held", a.finished(), false)
	p.Release()
	got := a.await(t, "after the release")
	refusedNow(t, "Peek with the waiter holding the slot", lim.Peek(k), 1, 0)
	got.Release()
	expect(t, "Peek().Remaining after the waiter's release", lim.Peek(k).Remaining, 1)
}

// waitersServedInOrder: a waiter for 3 of 3 slots is not overtaken by the
// smaller ones behind it, nor by TryAcquire, though slots are free; the
// others follow in their order as slots are released.
func waitersServedInOrder(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 3, 0)
	k := key(t, "k")
	first, _ := lim.TryAcquire(k, 1)
	big := startAcquire(t, lim, context.Background(), k, 3)
	r := lim.Peek(k)
	if r.Allowed || r.Remaining != 0 {
		t.Fatalf("Peek with 2 of 3 free and a waiter for 3 = %+v, want refused, Remaining 0: the waiter goes first", r)
	}
	for i := range 5 {
		if p, r := lim.TryAcquire(k, 1); r.Allowed {
			p.Release()
			t.Fatalf("TryAcquire(1) %d overtook the waiter for 3", i)
		}
	}
	small := []*acquisition{startAcquire(t, lim, context.Background(), k, 1), startAcquire(t, lim, context.Background(), k, 2)}
	time.Sleep(20 * time.Millisecond)
	for i, a := range append([]*acquisition{big}, small...) {
		expect(t, fmt.Sprintf("waiter %d returned while the first held a slot", i), a.finished(), false)
	}
	first.Release()
	whole := big.await(t, "the waiter for 3, once the slot was released")
	expect(t, "Peek().Remaining with the waiter for 3 holding", lim.Peek(k).Remaining, 0)
	expect(t, "a small waiter returned while the waiter for 3 held all", small[0].finished() || small[1].finished(), false)
	whole.Release()
	one, two := small[0].await(t, "the waiter for 1"), small[1].await(t, "the waiter for 2")
	expect(t, "Stats().Waiting once every waiter is served", stats(t, lim)().Waiting, 0)
	one.Release()
	two.Release()
	expect(t, "Peek().Remaining once all are released", lim.Peek(k).Remaining, 3)
}

// givingUpMovesTheQueueUp: a waiter whose context ends returns its error
// and holds nothing, and the waiter behind it, which it held up, is served.
func givingUpMovesTheQueueUp(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 2, 0)
	k := key(t, "k")
	held, _ := lim.TryAcquire(k, 1)
	ctx, cancel := context.WithCancel(context.Background())
	big := startAcquire(t, lim, ctx, k, 2)
	small := startAcquire(t, lim, context.Background(), k, 1)
	time.Sleep(20 * time.Millisecond)
	expect(t, "the waiter for 1 returned behind the waiter for 2", small.finished(), false)
	cancel()
	<-big.done
	if !errors.Is(big.err, context.Canceled) || big.permit != (keylimit.Permit{}) {
		t.Fatalf("the cancelled Acquire = %v, %v, want context.Canceled and the zero Permit", big.permit, big.err)
	}
	got := small.await(t, "the waiter for 1, once the one ahead gave up")
	expect(t, "Peek().Remaining with both slots held", lim.Peek(k).Remaining, 0)

	timeout, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := lim.Acquire(timeout, k, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a full key until a deadline = %v, want context.DeadlineExceeded", err)
	}
	held.Release()
	got.Release()
	expect(t, "Peek().Remaining once all are released", lim.Peek(k).Remaining, 2)
	expect(t, "Stats().Waiting", stats(t, lim)().Waiting, 0)
}

// neverAboveN: goroutines acquire (trying, and waiting with and without a
// deadline) and release the slots of two keys at random; the slots they
// hold are counted, and never exceed N. Every Release is counted, and once
// all are done, both keys have all their slots back.
func neverAboveN(t *testing.T, h concurrencyHarness) {
	const n, goroutines = 5, 16
	lim := newConcurrency(t, h, n, 0)
	keys := []string{key(t, "a"), key(t, "b")}
	var inFlight [2]atomic.Int64
	var over, acquisitions, releases atomic.Int64
	var wg sync.WaitGroup
	per := max(h.Attempts/goroutines, 10)
	for g := range goroutines {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for range per {
				i := rnd.IntN(2)
				want := 1 + rnd.IntN(2)
				var p keylimit.Permit
				var ok bool
				switch rnd.IntN(3) {
				case 0:
					var r keylimit.Result
					p, r = lim.TryAcquire(keys[i], want)
					ok = r.Allowed
				case 1:
					var err error
					p, err = lim.Acquire(context.Background(), keys[i], want)
					ok = err == nil
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.IntN(200))*time.Microsecond)
					var err error
					p, err = lim.Acquire(ctx, keys[i], want)
					cancel()
					ok = err == nil
				}
				if !ok {
					continue
				}
				acquisitions.Add(1)
				if inFlight[i].Add(int64(want)) > n {
					over.Add(1)
				}
				if rnd.IntN(4) == 0 {
					time.Sleep(time.Duration(rnd.IntN(50)) * time.Microsecond)
				}
				// Counted out before the release, so the count is never
				// below the slots the limiter holds.
				inFlight[i].Add(-int64(want))
				releases.Add(1)
				p.Release()
				if rnd.IntN(8) == 0 {
					p.Release() // a second release frees nothing
				}
			}
		})
	}
	wg.Wait()
	expect(t, "acquisitions that took a key above its limit", over.Load(), int64(0))
	expect(t, "releases", releases.Load(), acquisitions.Load())
	if acquisitions.Load() == 0 {
		t.Fatal("no acquisition succeeded")
	}
	for _, k := range keys {
		expect(t, "Peek().Remaining once every holder released", lim.Peek(k).Remaining, n)
	}
	expect(t, "Stats().Waiting once every goroutine is done", stats(t, lim)().Waiting, 0)
}

// concurrencySetter is a concurrency limiter whose limit can change while
// it runs.
type concurrencySetter interface {
	SetLimit(n int) error
}

// setConcurrencyLimit: a lowered limit keeps what is held and lets nothing
// more in until the holders leave room under it, and fails the waiters
// above it; a raised one serves the waiters it has room for at once; an
// invalid one is an error and changes nothing.
func setConcurrencyLimit(t *testing.T, h concurrencyHarness) {
	lim := newConcurrency(t, h, 4, 0)
	setter, ok := lim.(concurrencySetter)
	if !ok {
		t.Skipf("limitertest: %T has no SetLimit(int) error method", lim)
	}
	set := func(n int) {
		t.Helper()
		if err := setter.SetLimit(n); err != nil {
			t.Fatalf("SetLimit(%d): %v", n, err)
		}
	}
	k := key(t, "k")
	var held []keylimit.Permit
	for range 4 {
		p, _ := lim.TryAcquire(k, 1)
		held = append(held, p)
	}
	set(2)
	_, r := lim.TryAcquire(k, 1)
	refusedNow(t, "TryAcquire after lowering 4 to 2 with 4 held", r, 2, 0)
	held[0].Release()
	held[1].Release()
	_, r = lim.TryAcquire(k, 1)
	refusedNow(t, "TryAcquire with 2 held under a limit of 2", r, 2, 0)
	held[2].Release()
	p, r := lim.TryAcquire(k, 1)
	acquired(t, "TryAcquire with 1 held under a limit of 2", r, 2, 0)
	held = []keylimit.Permit{held[3], p}

	set(3)
	big := startAcquire(t, lim, context.Background(), k, 3)
	small := startAcquire(t, lim, context.Background(), k, 2)
	set(2) // the waiter for 3 can never pass now
	<-big.done
	if !errors.Is(big.err, keylimit.ErrExceedsLimit) {
		t.Fatalf("a waiter for 3 once the limit is 2 = %v, want ErrExceedsLimit", big.err)
	}
	time.Sleep(20 * time.Millisecond)
	expect(t, "the waiter for 2 returned with 2 of 2 held", small.finished(), false)
	set(5) // room for the waiter for 2
	got := small.await(t, "the waiter for 2 once the limit is raised to 5")
	expect(t, "Peek().Remaining with 4 of 5 held", lim.Peek(k).Remaining, 1)

	if err := setter.SetLimit(0); err == nil || !strings.HasPrefix(err.Error(), "keylimit") {
		t.Fatalf("SetLimit(0) = %v, want an error from keylimit", err)
	}
	expect(t, "Peek().Limit after an invalid SetLimit", lim.Peek(k).Limit, 5)
	got.Release()
	for _, p := range held {
		p.Release()
	}
	expect(t, "Peek().Remaining once all are released", lim.Peek(k).Remaining, 5)
}

func invalidConcurrencyLimits(t *testing.T, h concurrencyHarness) {
	for _, tt := range []struct {
		n       int
		maxHold time.Duration
	}{{0, 0}, {-3, 0}, {1, -time.Second}} {
		lim, err := h.New(t, tt.n, tt.maxHold)
		if err == nil {
			if c, ok := lim.(io.Closer); ok {
				c.Close()
			}
			t.Fatalf("New(%d, %v) returned no error", tt.n, tt.maxHold)
		}
		if !strings.HasPrefix(err.Error(), "keylimit") {
			t.Fatalf("New(%d, %v): error %q does not say it comes from keylimit", tt.n, tt.maxHold, err)
		}
		if lim != nil && !reflect.ValueOf(lim).IsNil() {
			t.Fatalf("New(%d, %v) returned a limiter with its error", tt.n, tt.maxHold)
		}
	}
}

// longestHoldTakesBack: slots held past the longest hold d are taken back
// no sooner than d after their acquisition and by 2 × d after it; the
// Release of their Permit afterwards gives back nothing, however many
// slots others hold by then.
func longestHoldTakesBack(t *testing.T, h concurrencyHarness) {
	const d = time.Minute
	lim := newConcurrency(t, h, 3, d)
	k := key(t, "k")
	h.Advance(17 * time.Second) // not on any boundary
	lost, _ := lim.TryAcquire(k, 2)
	kept, _ := lim.TryAcquire(k, 1)
	h.Advance(d - time.Nanosecond)
	_, r := lim.TryAcquire(k, 1)
	refusedNow(t, "TryAcquire 1 ns before the longest hold", r, 3, 0)
	kept.Release()
	h.Advance(d + time.Nanosecond)
	p, r := lim.TryAcquire(k, 3)
	acquired(t, "TryAcquire(3) two longest holds after the lost acquisition", r, 3, 0)
	lost.Release()
	expect(t, "Peek().Remaining after the late Release of slots taken back", lim.Peek(k).Remaining, 0)
	if st := stats(t, lim)(); st.Reclaimed != 2 {
		t.Fatalf("Stats().Reclaimed = %d, want the 2 slots taken back", st.Reclaimed)
	}
	p.Release()
	expect(t, "Peek().Remaining after the last Release", lim.Peek(k).Remaining, 3)
}

// longestHoldServesAWaiter: a waiter behind slots that are never released
// is served once they are taken back, with no other call on the key.
func longestHoldServesAWaiter(t *testing.T, h concurrencyHarness) {
	const d = time.Minute
	lim := newConcurrency(t, h, 2, d)
	k := key(t, "k")
	lim.TryAcquire(k, 2) // never released
	a := startAcquire(t, lim, context.Background(), k, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !a.finished() {
			h.Advance(d / 4)
			time.Sleep(time.Millisecond)
		}
	}()
	got := a.await(t, "the waiter behind slots never released")
	<-done
	got.Release()
	expect(t, "Peek().Remaining", lim.Peek(k).Remaining, 2)
}
