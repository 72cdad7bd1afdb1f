package benchmarks

import (
	"runtime"
	"time"
)

// MemoryQuota is the limit of the memory measurement. A key is idle (its
// bucket full again, its window over) 100 ms after its last use, and the
// limiters that can evict are asked to look for idle keys every 100 ms, so
// that "after the keys go idle" is a second or two away, not hours.
var MemoryQuota = Quota{Burst: 10, Period: 100 * time.Millisecond, Sweep: 100 * time.Millisecond}

// Memory is the heap a limiter keeps for its keys.
type Memory struct {
	Keys int
	// PerKey is the live heap the limiter holds per key, with every key
	// used once and still within its quota's memory.
	PerKey float64
	// IdlePerKey is the same once the keys have gone idle and the
	// limiter's eviction has run; it is only measured when Idle is true.
	IdlePerKey float64
	Idle       bool
	// IdleAfter is how long the wait for IdlePerKey took, from the last
	// key's use.
	IdleAfter time.Duration
}

// MeasureMemory builds c for MemoryQuota, calls Allow once on each of n new
// keys, and reports the heap it then holds per key: the live heap after two
// full collections, less the live heap before c was built, over n. The keys
// are made inside the measurement and dropped at once, so that only the
// bytes the limiter chose to keep are counted, the key's own bytes included
// if it keeps them.
//
// If idle is true and c evicts, it then waits, collecting every poll, until
// the live heap has stopped shrinking (or until maxWait), and measures again.
func MeasureMemory(c Contender, n int, idle bool, poll, maxWait time.Duration) (Memory, error) {
	base := liveHeap()
	lim, err := c.New(MemoryQuota)
	if err != nil {
		return Memory{}, err
	}
	defer Close(lim)
	for i := range n {
		lim.Allow(Key(i))
	}
	used := time.Now()
	m := Memory{Keys: n, PerKey: perKey(liveHeap(), base, n)}
	if idle && c.Evicts != "" {
		m.Idle = true
		m.IdlePerKey, m.IdleAfter = waitForEviction(base, n, used, poll, maxWait)
	}
	runtime.KeepAlive(lim)
	return m, nil
}

// waitForEviction collects every poll until the live heap has not shrunk for
// three polls in a row after at least two idle periods and two sweeps, or
// until maxWait has passed since used, and returns the heap per key then.
func waitForEviction(base uint64, n int, used time.Time, poll, maxWait time.Duration) (float64, time.Duration) {
	q := MemoryQuota
	earliest := used.Add(2*q.Period + 2*q.Sweep)
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
	return perKey(last, base, n), time.Since(used)
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
