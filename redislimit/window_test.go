package redislimit_test

import (
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// untilBoundary sleeps until lead before the next multiple of period on the
// Unix clock, which this machine shares with its Redis server.
func untilBoundary(period, lead time.Duration) {
	into := time.Duration(time.Now().UnixNano()) % period
	wait := period - into - lead
	if wait < 0 {
		wait += period
	}
	time.Sleep(wait)
}

// TestFixedWindowsAlignToTheEpoch: a fixed window ends at a multiple of its
// period since the Unix epoch, as the in-memory FixedWindow's do, whatever
// the time of the first request.
func TestFixedWindowsAlignToTheEpoch(t *testing.T) {
	const period = 700 * time.Millisecond
	lim, err := redislimit.NewFixedWindow(shared.client(t), keylimit.Per(5, period), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		time.Sleep(time.Duration(rand.Int64N(int64(period))))
		r := lim.Take(testKey(t, "k"), 1)
		end := period - time.Duration(time.Now().UnixNano())%period
		if !near(r.ResetAfter, end, 20*time.Millisecond) {
			t.Fatalf("request %d: ResetAfter %v, but the aligned window ends in %v", i, r.ResetAfter, end)
		}
	}
}

// TestBoundary is the boundary comparison of fixed and sliding windows, on
// Redis: 5 per 500 ms; 5 requests 100 ms before a window boundary, 5 more
// 200 ms later. The fixed window admits all 10 (its known weakness); the
// sliding window refuses the second 5 until the first have left, about
// 300 ms later.
func TestBoundary(t *testing.T) {
	const period = 500 * time.Millisecond
	l := keylimit.Per(5, period)
	c := shared.client(t)
	fixed, err := redislimit.NewFixedWindow(c, l, redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	sliding, err := redislimit.NewSlidingWindow(c, l, redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	fk, sk := testKey(t, "fixed"), testKey(t, "sliding")
	untilBoundary(period, 100*time.Millisecond)
	if !fixed.AllowN(fk, 5) || !sliding.AllowN(sk, 5) {
		t.Fatal("the first 5 requests were refused")
	}
	time.Sleep(200 * time.Millisecond)
	if !fixed.AllowN(fk, 5) {
		t.Fatal("fixed window: the 5 requests after the boundary were refused")
	}
	r := sliding.Take(sk, 1)
	if r.Allowed || !near(r.RetryAfter, 300*time.Millisecond, 50*time.Millisecond) {
		t.Fatalf("sliding window after the boundary: %+v, want refused with RetryAfter about 300ms", r)
	}
}

// TestSlidingRetryAfterIsWhenTheOldestLeaves: with entries at t0 and
// t0+100ms in a 3-per-300ms log (two at t0+100ms), RetryAfter is when the
// t0 entry leaves; after waiting it, exactly one request passes, and the
// next waits for the t0+100ms entries. (Without the deny cache, which
// answers Take(2) after a refused Take(1) with Take(1)'s RetryAfter, a
// lower bound.)
func TestSlidingRetryAfterIsWhenTheOldestLeaves(t *testing.T) {
	lim, err := redislimit.NewSlidingWindow(shared.client(t), keylimit.Per(3, 300*time.Millisecond),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, "k")
	lim.Allow(key)
	time.Sleep(100 * time.Millisecond)
	lim.AllowN(key, 2)
	r := lim.Take(key, 1)
	if r.Allowed || !near(r.RetryAfter, 200*time.Millisecond, 50*time.Millisecond) ||
		!near(r.ResetAfter, 300*time.Millisecond, 50*time.Millisecond) {
		t.Fatalf("full log: %+v, want refused, RetryAfter about 200ms (oldest leaves), ResetAfter about 300ms (newest leaves)", r)
	}
	if r2 := lim.Take(key, 2); r2.Allowed || !near(r2.RetryAfter, 300*time.Millisecond, 50*time.Millisecond) {
		t.Fatalf("Take(2) on the full log: %+v, want refused with RetryAfter about 300ms (two must leave)", r2)
	}
	time.Sleep(r.RetryAfter)
	if !lim.Allow(key) {
		t.Fatalf("refused after waiting RetryAfter %v", r.RetryAfter)
	}
	if r = lim.Take(key, 1); r.Allowed || r.RetryAfter > 110*time.Millisecond {
		t.Fatalf("after the oldest left and one more came in: %+v, want refused until the second entries leave", r)
	}
}

// TestSlidingNeverExceedsInAnyInterval drives a sliding log from many
// goroutines at random moments and checks every admission: no 6 of them
// fall within one period (5 per 120 ms). Admission times are known to lie
// between the call and its return, so a group that certainly fits in one
// period (last return - first call < period) is a violation.
func TestSlidingNeverExceedsInAnyInterval(t *testing.T) {
	const events, period = 5, 120 * time.Millisecond
	lim, err := redislimit.NewSlidingWindow(shared.client(t), keylimit.Per(events, period),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, "k")
	type span struct{ start, end time.Time }
	var (
		mu       sync.Mutex
		admitted []span
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(time.Second)
	for range 6 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Millisecond))))
				start := time.Now()
				if lim.Allow(key) {
					end := time.Now()
					mu.Lock()
					admitted = append(admitted, span{start, end})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].start.Before(admitted[j].start) })
	if len(admitted) < 2*events {
		t.Fatalf("only %d admissions in a second of 5 per %v: the limiter refuses too much", len(admitted), period)
	}
	for i := range len(admitted) - events {
		first, last := admitted[i], admitted[i+events]
		if last.end.Sub(first.start) < period {
			t.Fatalf("admissions %d to %d (%d of them) all happened within %v, less than the period %v",
				i, i+events, events+1, last.end.Sub(first.start), period)
		}
	}
}
