package benchmarks

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// The rows of BenchmarkAllow read as a table:
//
//	BenchmarkAllow/<loose|tight>/keys=<n>/<serial|parallel>/<contender>
//
// Every contender on a row is asked the same keys in the same order. Keys
// are distinct, built before the timer, and each one is used once before
// the timer starts, so that every call measured is on a key the limiter
// already holds; they are visited in a shuffled order (Keys).

// benchLimit is a limit of the table: loose admits nearly everything, tight
// refuses nearly everything (each key's one event is spent before the timer).
// Each row reports the share it admitted (admitted/op), so that a row where
// a limit did not behave as its name says shows in the table.
//
// loose is 31 events per 250 ns per key, about 10⁸ a second: above what one
// key is asked here (a call every 15 ns at the most), and near the fastest
// rate every contender can express (a SlidingCounter counts at most 31
// events in a 250 ns window; a SlidingWindow keeps 8 bytes per event per
// key, so a large burst would cost gigabytes at 1M keys). The burst must
// also outlast the staleness of a clock read: a bucket whose burst spans
// less time than a contended call takes (15 per 50 ns spans 60 ns) refuses
// a goroutine whose clock read is older than its rival's admission.
type benchLimit struct {
	name  string
	quota Quota
}

var benchLimits = []benchLimit{
	{"loose", Quota{Burst: 31, Period: 250 * time.Nanosecond}},
	{"tight", Quota{Burst: 1, Period: time.Hour}},
}

// benchRow is a row of the table: how many keys, and whether one goroutine
// asks (serial) or GOMAXPROCS goroutines do (parallel; set with -cpu).
type benchRow struct {
	keys     int
	keysName string
	parallel bool
}

func (r benchRow) String() string {
	mode := "serial"
	if r.parallel {
		mode = "parallel"
	}
	return fmt.Sprintf("keys=%s/%s", r.keysName, mode)
}

var benchRows = []benchRow{
	{1, "1", false},
	{1, "1", true},
	{10_000, "10k", true},
	{MaxKeys, "1M", true},
}

func BenchmarkAllow(b *testing.B) {
	built := newInstances()
	defer built.closeAll(b)
	for _, bl := range benchLimits {
		for _, row := range benchRows {
			for _, c := range Contenders() {
				b.Run(bl.name+"/"+row.String()+"/"+c.Name, func(b *testing.B) {
					lim, keys := built.get(b, c, bl, row.keys)
					runAllow(b, lim, keys, row.parallel)
				})
			}
		}
	}
}

// runAllow calls lim.Allow b.N times over keys, and reports the share of
// calls admitted. In parallel, each goroutine starts at its own place in
// keys and walks on from there.
func runAllow(b *testing.B, lim Limiter, keys []string, parallel bool) {
	b.ReportAllocs()
	if !parallel {
		i, admitted := 0, 0
		for b.Loop() {
			if lim.Allow(keys[i]) {
				admitted++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
		return
	}
	var seed, total atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(0x9E3779B9) % uint64(len(keys)))
		admitted := uint64(0)
		for pb.Next() {
			if lim.Allow(keys[i]) {
				admitted++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		total.Add(admitted)
	})
	b.ReportMetric(float64(total.Load())/float64(b.N), "admitted/op")
}

// instances builds each limiter of the table once, however many times the
// testing package calls a row (once per b.N it tries, per -count, per -cpu),
// and keeps it while rows use it. Only one limiter holding the 1M keys is
// kept at a time: the rows that need one are consecutive, and all of them
// at once would not fit in memory.
type instances struct {
	keys map[int][]string
	lims map[instanceKey]Limiter
}

type instanceKey struct {
	contender, limit string
	keys             int
}

func newInstances() *instances {
	return &instances{keys: make(map[int][]string), lims: make(map[instanceKey]Limiter)}
}

// get returns c built for bl, with each of n keys used once, and the keys.
func (in *instances) get(b *testing.B, c Contender, bl benchLimit, n int) (Limiter, []string) {
	keys, ok := in.keys[n]
	if !ok {
		keys = Keys(n)
		in.keys[n] = keys
	}
	k := instanceKey{c.Name, bl.name, n}
	if lim, ok := in.lims[k]; ok {
		return lim, keys
	}
	if n == MaxKeys {
		in.closeLarge(b)
	}
	lim, err := c.New(bl.quota)
	if err != nil {
		b.Fatalf("%s: %v", c.Name, err)
	}
	for _, key := range keys {
		lim.Allow(key)
	}
	in.lims[k] = lim
	return lim, keys
}

// closeLarge closes and forgets the limiters that hold MaxKeys keys, and
// collects their memory so that the next row does not pay for it.
func (in *instances) closeLarge(b *testing.B) {
	for k, lim := range in.lims {
		if k.keys == MaxKeys {
			closeOrFail(b, k, lim)
			delete(in.lims, k)
		}
	}
	runtime.GC()
}

func (in *instances) closeAll(b *testing.B) {
	for k, lim := range in.lims {
		closeOrFail(b, k, lim)
	}
	clear(in.lims)
}

func closeOrFail(b *testing.B, k instanceKey, lim Limiter) {
	if err := Close(lim); err != nil {
		b.Errorf("closing %s: %v", k.contender, err)
	}
}
