// Package hotpath is the one harness of keylimit's hot-path benchmarks: the
// rows of the table, the keys they ask about, the floor they are read
// against, and how a row is run. The root package's bench_test.go runs
// keylimit's four types and the floor through it; the benchmarks module runs
// the same rows with other Go rate limiters beside them. Rows read as a
// table:
//
//	BenchmarkAllow/<limiter>/keys=<n>/<serial|parallel>[-GOMAXPROCS]
//
// Keys are distinct, made before the timer, and each is used once before
// the timer starts, so that every call measured is on a key the limiter
// holds; they are visited in a shuffled order. serial is one goroutine;
// parallel is b.RunParallel, GOMAXPROCS goroutines: vary it with -cpu.
package hotpath

import (
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Allower is what a row calls: may one event for key happen now? Every
// limiter and the floor are called through it, so that all pay the same
// dynamic dispatch.
type Allower interface {
	Allow(key string) bool
}

// Limit is a limit the rows are run under: Events per Period, all of them
// at once if asked (a token bucket's burst).
type Limit struct {
	Events int
	Period time.Duration
	// Spent: each key is asked Events times before every run of a row,
	// which spends what it holds, rather than once when the row is built.
	Spent bool
}

var (
	// Loose admits nearly every call: 31 events per 250 ns per key, about
	// 10⁸ a second, more than one key is asked here. It is near the fastest
	// rate every keylimit type expresses (a SlidingCounter counts at most 31
	// events in a 250 ns window; a SlidingWindow keeps 8 bytes per event per
	// key, so a larger burst would cost gigabytes at a million keys), and its
	// burst spans longer than a contended call takes, so that a goroutine
	// whose clock read is older than a rival's admission is not refused.
	Loose = Limit{Events: 31, Period: 250 * time.Nanosecond}
	// Tight refuses every call measured: 1 an hour, spent by the call that
	// adds the key, before the timer.
	Tight = Limit{Events: 1, Period: time.Hour}
	// Refilling refuses nearly every call measured, as Tight does, but its
	// keys refill: 10 a second, the key spent before every run. A refusal
	// is then at most 100 ms from its next event, where under Tight it is
	// most of an hour. It runs the one-key rows only: many keys' refills
	// (10⁵ events a second for 10⁴ keys) would be a share of the calls
	// that depends on the machine's speed.
	Refilling = Limit{Events: 10, Period: time.Second, Spent: true}
)

// Row is a row of the table: how many keys, and whether one goroutine asks
// (serial) or b.RunParallel's GOMAXPROCS goroutines do (parallel).
type Row struct {
	Keys     int
	Parallel bool
}

// Rows are the rows every limiter runs, in this order.
var Rows = []Row{{1, false}, {1, true}, {10_000, true}, {MaxKeys, true}}

// String is the row's part of a benchmark name: keys=1e4/parallel.
func (r Row) String() string {
	keys := strconv.Itoa(r.Keys)
	if zeros := len(keys) - len(strings.TrimRight(keys, "0")); zeros >= 2 {
		keys = keys[:len(keys)-zeros] + "e" + strconv.Itoa(zeros)
	}
	mode := "serial"
	if r.Parallel {
		mode = "parallel"
	}
	return "keys=" + keys + "/" + mode
}

// Run runs every row for one limiter, as sub-benchmarks of b named
// name/<row>. For each row it builds a new limiter with newL(l), on the
// row's first call, outside the timer, and closes it (if it is an
// io.Closer) when the row is done, so that at most one limiter holding
// MaxKeys keys is alive at a time. Under -short the MaxKeys row is left out:
// its setup is most of a -benchtime=1x pass. A Spent limit runs the
// one-key rows only (see Refilling).
func Run(b *testing.B, name string, l Limit, newL func(Limit) (Allower, error)) {
	b.Run(name, func(b *testing.B) {
		for _, row := range Rows {
			if row.Keys == MaxKeys && testing.Short() || row.Keys > 1 && l.Spent {
				continue
			}
			var lim Allower
			var keys []string
			b.Run(row.String(), func(b *testing.B) {
				// The testing package calls this once per b.N it tries, and
				// again for each -count: the limiter is built on the first.
				if lim == nil {
					keys = Keys(row.Keys)
					var err error
					if lim, err = newL(l); err != nil {
						b.Fatalf("%s: %v", name, err)
					}
					for _, k := range keys {
						lim.Allow(k)
					}
				}
				if l.Spent {
					// Whatever the keys got back since the last run.
					for _, k := range keys {
						for range l.Events {
							lim.Allow(k)
						}
					}
				}
				RunRow(b, lim, keys, row.Parallel)
			})
			if c, ok := lim.(io.Closer); ok {
				if err := c.Close(); err != nil {
					b.Errorf("%s: Close: %v", name, err)
				}
			}
			if row.Keys == MaxKeys {
				lim, keys = nil, nil
				runtime.GC() // so that the next limiter's rows do not pay for this one
			}
		}
	})
}

// RunRow calls lim.Allow b.N times over keys, each of which lim holds
// already, and reports allocations and the share of calls admitted
// (admitted/op), so that a row where a limit did not behave as its name
// says shows in the table, and the process's CPU time a call (cpu-ns/op,
// where the system reports it; see cpuTime). In parallel, each goroutine
// starts at its own place in keys and walks on from there.
func RunRow(b *testing.B, lim Allower, keys []string, parallel bool) {
	b.ReportAllocs()
	cpu := cpuTime()
	defer func() {
		if cpu > 0 {
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		}
	}()
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
