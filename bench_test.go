package keylimit_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/puzpuzpuz/xsync/v3"
)

// The rows of every hot-path benchmark, read as a table:
//
//	BenchmarkAllow/<limiter>/keys=<n>/<serial|parallel>
//
// "floor" is the least a keyed limiter can do per call, measured in the same
// run: read the monotonic clock, find the key's word in an xsync map, and CAS
// it. A limiter's ns/op divided by the floor's on the same row is a ratio
// that does not depend on the machine. Keys are distinct 16-byte strings,
// built and inserted before the timer starts, and visited in a shuffled
// order so that large key sets pay the memory latency real traffic pays.

// allower is what the benchmarks call, so that the floor and the limiters
// pay the same dynamic dispatch.
type allower interface{ Allow(key string) bool }

// floor is the physical floor of a keyed decision.
type floor struct {
	m     *xsync.MapOf[string, *atomic.Int64]
	start time.Time
}

func newFloor(keys []string) *floor {
	f := &floor{m: xsync.NewMapOf[string, *atomic.Int64](), start: time.Now()}
	for _, k := range keys {
		f.m.Store(k, new(atomic.Int64))
	}
	return f
}

func (f *floor) Allow(key string) bool {
	now := int64(time.Since(f.start))
	w, _ := f.m.Load(key)
	old := w.Load()
	return w.CompareAndSwap(old, now)
}

// benchLimiter builds a limiter for the benchmarks.
type benchLimiter struct {
	name string
	new  func(b *testing.B, l keylimit.Limit) keylimit.Limiter[string]
}

// benchLimiters lists every limiter type the hot-path benchmarks run.
//
// The window types take the benchmark's limits as far as they can:
//   - sliding keeps 8 bytes per event of the quota per key, so loose
//     becomes 10 events per 10 ns, the same rate in 80 bytes a key (a
//     million keys of 10,000 events would need 80 GB);
//   - counter counts at most 16,777,215 a day (two counts and a window
//     share its word), so loose becomes that: on one key, a run of more
//     than 16.7 million iterations refuses the rest. Compare it with
//     -benchtime=10000000x.
var benchLimiters = []benchLimiter{
	{"bucket", benchNew(keylimit.NewTokenBucket[string], nil)},
	{"fixed", benchNew(keylimit.NewFixedWindow[string], nil)},
	{"sliding", benchNew(keylimit.NewSlidingWindow[string], func(l keylimit.Limit) keylimit.Limit {
		if l.Events <= 10 {
			return l
		}
		return keylimit.Per(10, l.Period*10/time.Duration(l.Events))
	})},
	{"counter", benchNew(keylimit.NewSlidingCounter[string], func(l keylimit.Limit) keylimit.Limit {
		if l == loose {
			return keylimit.Per(16_777_215, 24*time.Hour)
		}
		return l
	})},
}

// benchNew makes a benchLimiter.new of a constructor; fit, if not nil,
// adapts the benchmark's limit to what the type takes.
func benchNew[L interface {
	keylimit.Limiter[string]
	Close() error
}](ctor func(keylimit.Limit, ...keylimit.Option) (L, error), fit func(keylimit.Limit) keylimit.Limit) func(b *testing.B, l keylimit.Limit) keylimit.Limiter[string] {
	return func(b *testing.B, l keylimit.Limit) keylimit.Limiter[string] {
		if fit != nil {
			l = fit(l)
		}
		lim, err := ctor(l)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lim.Close() })
		return lim
	}
}

var (
	// loose admits nearly everything; tight refuses nearly everything.
	loose = keylimit.PerSecond(1_000_000_000)
	tight = keylimit.PerHour(1)
)

var benchKeyCounts = []struct {
	name string
	n    int
}{{"1", 1}, {"10k", 10_000}, {"1M", 1_000_000}}

var (
	benchKeysOnce sync.Once
	benchKeysAll  []string
)

// benchKeys returns n distinct 16-byte keys in a shuffled order.
func benchKeys(n int) []string {
	benchKeysOnce.Do(func() {
		benchKeysAll = make([]string, 1_000_000)
		for i := range benchKeysAll {
			benchKeysAll[i] = fmt.Sprintf("%016x", uint64(i)*0x9E3779B97F4A7C15)
		}
	})
	keys := append([]string(nil), benchKeysAll[:n]...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

func BenchmarkAllow(b *testing.B) {
	for _, kc := range benchKeyCounts {
		keys := benchKeys(kc.n)
		modes := []string{"parallel"}
		if kc.n == 1 {
			modes = []string{"serial", "parallel"}
		}
		for _, mode := range modes {
			name := fmt.Sprintf("keys=%s/%s", kc.name, mode)
			b.Run("floor/"+name, func(b *testing.B) { runAllow(b, newFloor(keys), keys, mode) })
			for _, bl := range benchLimiters {
				b.Run(bl.name+"/"+name, func(b *testing.B) {
					lim := bl.new(b, loose)
					for _, k := range keys {
						lim.Allow(k)
					}
					runAllow(b, lim, keys, mode)
				})
				b.Run(bl.name+"-refused/"+name, func(b *testing.B) {
					lim := bl.new(b, tight)
					for _, k := range keys {
						lim.Allow(k)
					}
					runAllow(b, lim, keys, mode)
				})
			}
		}
	}
}

func runAllow(b *testing.B, lim allower, keys []string, mode string) {
	b.ReportAllocs()
	b.ResetTimer()
	if mode == "serial" {
		i := 0
		for b.Loop() {
			lim.Allow(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
		return
	}
	var seed atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(0x9E3779B9) % uint64(len(keys)))
		for pb.Next() {
			lim.Allow(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}
