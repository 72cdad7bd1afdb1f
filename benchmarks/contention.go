package benchmarks

import (
	"sync"
	"time"
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
	// Bound is the most the quota allows in the time the count took:
	// Burst + Burst × elapsed / Period, rounded down.
	Bound int
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
	key := Key(-1) // a key no benchmark uses

	admitted := make([]int, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range attempts {
				if lim.Allow(key) {
					admitted[g]++
				}
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)

	a := Admission{Goroutines: goroutines, Attempts: attempts}
	for _, n := range admitted {
		a.Admitted += n
	}
	if e, ok := lim.(Errors); ok {
		a.Errors = e.Errors()
	}
	a.Bound = q.Burst + int(int64(q.Burst)*int64(elapsed)/int64(q.Period))
	return a, nil
}
