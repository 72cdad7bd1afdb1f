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
var benchLimiters = []benchLimiter{
	{"bucket", func(b *testing.B, l keylimit.Limit) keylimit.Limiter[string] {
		lim, err := keylimit.NewTokenBucket[string](l)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lim.Close() })
		return lim
	}},
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
