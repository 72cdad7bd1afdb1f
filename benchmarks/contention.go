package benchmarks

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
)

// HotKeyQuota is the limit of the contention count: 100 events per hour, so
// that the clock barely moves while it runs and the exact bound is the burst.
var HotKeyQuota = Quota{Burst: 100, Period: time.Hour}

// DeepBurstQuota is the same on a deep bucket: a million events per hour.
// With more attempts than that, every call until the burst is spent is an
// admission that races with the others, not just the first hundred.
var DeepBurstQuota = Quota{Burst: 1_000_000, Period: time.Hour}

// Admission is what one limiter did when many goroutines asked it, all at
// once, for one key it had never seen.
type Admission struct {
	Goroutines int   // how many asked
	Attempts   int   // how many times each asked
	Admitted   int   // calls that returned true
	Errors     int64 // calls that failed with an error (and were refused)
	// Bound is the most the contender's algorithm may admit for the quota
	// in the time the count took (Contender.Bound).
	Bound int
}

// Bound is the most a limiter may admit for one key with quota q between
// start and end.
type Bound func(q Quota, start, end time.Time) int

// BucketBound is the bound of a token bucket: Burst, plus Burst per Period
// of the time elapsed, rounded down. It also bounds a window that starts
// with the key (ulule's, sethvargo's) and a sliding window, for a count
// shorter than Period: they admit at most Burst then.
func BucketBound(q Quota, start, end time.Time) int {
	return q.Burst + int(int64(q.Burst)*int64(end.Sub(start))/int64(q.Period))
}

// EpochWindowBound is the bound of a limiter that admits Burst per window
// of Period aligned to the Unix epoch (keylimit's FixedWindow, and its
// SlidingCounter, which never admits more than that): Burst for each window
// the count touched, two if it crossed a boundary.
func EpochWindowBound(q Quota, start, end time.Time) int {
	p := int64(q.Period)
	return q.Burst * int(end.UnixNano()/p-start.UnixNano()/p+1)
}

// Contend builds c for q and has goroutines goroutines call Allow attempts
// times each on one new key, all released at once. The key is not created
// beforehand: the race to create it is part of what is counted.
func Contend(c Contender, q Quota, goroutines, attempts int) (Admission, error) {
	lim, err := c.New(q)
	if err != nil {
		return Admission{}, err
	}
	defer Close(lim)
	key := hotpath.Key(-1) // a key no benchmark uses

	var admitted atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n := int64(0)
			for range attempts {
				if lim.Allow(key) {
					n++
				}
			}
			admitted.Add(n)
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	ended := time.Now()

	a := Admission{Goroutines: goroutines, Attempts: attempts, Admitted: int(admitted.Load())}
	if e, ok := lim.(Errors); ok {
		a.Errors = e.Errors()
	}
	bound := c.Bound
	if bound == nil {
		bound = BucketBound
	}
	a.Bound = bound(q, began, ended)
	return a, nil
}
