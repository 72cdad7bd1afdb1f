package benchmarks

import (
	"runtime"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
)

// HeldQuota is the limit of the first memory measurement: a key used once
// stays in its quota's memory for minutes, so no limiter may forget it
// while it is being measured.
var HeldQuota = Quota{Burst: 10, Period: time.Hour}

// IdleQuota is the limit of the second: a key is idle (its bucket full
// again, its window over) 100 ms after its last use, and the limiters that
// can evict are asked to look for idle keys every 100 ms, so that "after the
// keys go idle" is a second or two away, not hours.
var IdleQuota = Quota{Burst: 10, Period: 100 * time.Millisecond, Sweep: 100 * time.Millisecond}

// HeapPerKey builds c for HeldQuota, calls Allow once on each of n new keys,
// and returns the heap it then holds per key: the live heap after two full
// collections, less the live heap before c was built, over n. The keys are
// made inside the measurement and dropped at once, so that only the bytes the
// limiter chose to keep are counted, the key's own bytes included if it
// keeps them.
func HeapPerKey(c Contender, n int) (float64, error) {
	base := liveHeap()
	lim, err := useKeys(c, HeldQuota, n)
	if err != nil {
		return 0, err
	}
	defer Close(lim)
	perKey := perKey(liveHeap(), base, n)
	runtime.KeepAlive(lim)
	return perKey, nil
}

// HeapPerKeyOnceIdle is HeapPerKey for IdleQuota, measured once the keys
// have gone idle and c has had time to evict them: it collects every poll
// until the live heap has not shrunk for three polls in a row (and at least
// two idle periods and two sweeps have passed), or until maxWait, and
// returns the heap per key then and how long it waited. Measure only the
// contenders that evict: for the others it waits for nothing.
func HeapPerKeyOnceIdle(c Contender, n int, poll, maxWait time.Duration) (float64, time.Duration, error) {
	base := liveHeap()
	lim, err := useKeys(c, IdleQuota, n)
	if err != nil {
		return 0, 0, err
	}
	defer Close(lim)
	used := time.Now()
	earliest := used.Add(2*IdleQuota.Period + 2*IdleQuota.Sweep)
	last, steady := liveHeap(), 0
	for time.Since(used) < maxWait {
		time.Sleep(poll)
		h := liveHeap()
		if h < last {
			last, steady = h, 0
			continue
		}
		if steady++; steady >= 3 && time.Now().After(earliest) {
			break
		}
	}
	runtime.KeepAlive(lim)
	return perKey(last, base, n), time.Since(used), nil
}

// useKeys builds c for q and calls Allow once on each of n new keys.
func useKeys(c Contender, q Quota, n int) (Limiter, error) {
	lim, err := c.New(q)
	if err != nil {
		return nil, err
	}
	for i := range n {
		lim.Allow(hotpath.Key(i))
	}
	return lim, nil
}

// liveHeap returns the bytes of live heap objects after two full
// collections (the second frees what the first's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func perKey(heap, base uint64, n int) float64 {
	return (float64(heap) - float64(base)) / float64(n)
}
