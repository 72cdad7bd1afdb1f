package keylimit

import (
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// These tests call sweep directly, so that "at any eviction interval" means
// what it says: a sweep after every single step.

// testClock is a goroutine-safe clock moved by hand; only Now is used.
type testClock struct {
	clock.Clock
	ns atomic.Int64
}

func newTestClock() *testClock {
	c := &testClock{Clock: clock.NewMock()}
	c.ns.Store(time.Unix(1e9, 0).UnixNano())
	return c
}

func (c *testClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// fullSize reports whether the tests run at full size (go test . -args
// -full; the flag is the external tests' own).
func fullSize() bool {
	f := flag.Lookup("full")
	return f != nil && f.Value.String() == "true"
}

func sweepNow[K comparable, S any](k *shard[K, S]) int {
	k.sweepMu.Lock()
	defer k.sweepMu.Unlock()
	return k.sweep()
}

// TestEvictionNeverChangesADecision runs the same random workload on two
// buckets, one swept after every step and one never, and requires every
// Result to be identical. Keys do get evicted along the way.
func TestEvictionNeverChangesADecision(t *testing.T) {
	for _, l := range []Limit{PerSecond(4).WithBurst(3), PerMinute(10), Per(7, 330*time.Millisecond).WithBurst(2)} {
		clk := newTestClock()
		swept, err := NewTokenBucket[int](l, WithClock(clk), WithEvictionInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		kept, _ := NewTokenBucket[int](l, WithClock(clk), WithEvictionInterval(0))
		rng := rand.New(rand.NewPCG(1, uint64(l.Events)))
		evicted := 0
		for step := range 20_000 {
			key := rng.IntN(5)
			switch op := rng.IntN(10); {
			case op < 3:
				clk.Add(time.Duration(rng.Int64N(int64(l.Interval()))))
			case op < 8:
				n := rng.IntN(l.BurstSize()) + 1
				if a, b := swept.Take(key, n), kept.Take(key, n); a != b {
					t.Fatalf("%v step %d: Take(%d, %d) = %+v with eviction, %+v without", l, step, key, n, a, b)
				}
			default:
				if a, b := swept.Peek(key), kept.Peek(key); a != b {
					t.Fatalf("%v step %d: Peek(%d) = %+v with eviction, %+v without", l, step, key, a, b)
				}
			}
			evicted += sweepNow(swept.keys)
		}
		if evicted < 100 {
			t.Fatalf("%v: only %d evictions: the test did not exercise eviction", l, evicted)
		}
		if kept.Len() != 5 || swept.Len() > 5 {
			t.Fatalf("%v: Len %d without eviction (want 5), %d with", l, kept.Len(), swept.Len())
		}
	}
}

// TestExhaustedKeyIsNotEvictedBeforeRefill: an exhausted key survives every
// sweep until its bucket is full again, and goes at the first sweep after.
func TestExhaustedKeyIsNotEvictedBeforeRefill(t *testing.T) {
	clk := newTestClock()
	l := PerSecond(10).WithBurst(20) // full again 2 s after exhaustion
	b, _ := NewTokenBucket[string](l, WithClock(clk), WithEvictionInterval(0))
	if !b.AllowN("k", 20) {
		t.Fatal("a new key refused its burst")
	}
	for elapsed := time.Duration(0); elapsed < 2*time.Second; elapsed += time.Millisecond {
		if n := sweepNow(b.keys); n != 0 || b.Len() != 1 {
			t.Fatalf("at %v after exhaustion: a sweep evicted %d keys, Len %d", elapsed, n, b.Len())
		}
		clk.Add(time.Millisecond)
	}
	if n := sweepNow(b.keys); n != 1 || b.Len() != 0 {
		t.Fatalf("once full: a sweep evicted %d keys, Len %d; want 1 and 0", n, b.Len())
	}
}

// TestEvictionRaceAdmitsExactly: goroutines hammer a few keys while sweeps
// run back to back. The clock is frozen within a round and jumps past every
// refill between rounds, so that each key starts each round idle (and the
// sweeper may retire it at any moment) and must admit exactly its burst in
// the round: an admission recorded in a state that was evicted would show as
// an extra one.
func TestEvictionRaceAdmitsExactly(t *testing.T) {
	const burst = 50
	clk := newTestClock()
	b, _ := NewTokenBucket[int](PerHour(burst), WithClock(clk), WithEvictionInterval(0))
	admitExactlyWhileSweeping(t, clk, b.Allow, func() int { return sweepNow(b.keys) }, burst, 2*time.Hour)
}

// admitExactlyWhileSweeping runs the rounds of TestEvictionRaceAdmitsExactly
// on a limiter of quota events per key: allow is its Allow, sweep a sweep of
// its keys, idle a clock step after which every key is idle.
func admitExactlyWhileSweeping(t *testing.T, clk *testClock, allow func(int) bool, sweep func() int, quota int64, idle time.Duration) {
	t.Helper()
	const keys = 4
	rounds := 60
	if fullSize() {
		rounds = 200
	}
	stop := make(chan struct{})
	var sweeps, evicted atomic.Int64
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				evicted.Add(int64(sweep()))
				sweeps.Add(1)
			}
		}
	})
	for round := range rounds {
		var admitted [keys]atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 400 {
					k := (g + i) % keys
					if allow(k) {
						admitted[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		for k := range keys {
			if got := admitted[k].Load(); got != quota {
				t.Fatalf("round %d key %d: admitted %d, want exactly %d", round, k, got, quota)
			}
		}
		clk.Add(idle)
		if round%2 == 0 {
			// Let two sweeps pass, so that this round meets evicted keys
			// (the replace path); odd rounds race with the sweeper.
			for s0 := sweeps.Load(); sweeps.Load() < s0+2; {
				runtime.Gosched()
			}
		}
	}
	close(stop)
	sweeper.Wait()
	if evicted.Load() == 0 {
		t.Fatalf("%d sweeps evicted nothing: the race was not exercised", sweeps.Load())
	}
	t.Logf("%d sweeps, %d evictions during %d rounds", sweeps.Load(), evicted.Load(), rounds)
}

// TestKeyCapSweepsOnlyIdleKeys: at the cap a new key evicts idle keys and
// never a key still in use.
func TestKeyCapSweepsOnlyIdleKeys(t *testing.T) {
	clk := newTestClock()
	b, _ := NewTokenBucket[string](PerSecond(1).WithBurst(2), WithClock(clk), WithEvictionInterval(0), WithMaxKeys(3))
	b.AllowN("victim", 2) // exhausted: full again in 2 s
	b.Allow("a")          // full again in 1 s
	b.Allow("b")
	if r := b.Take("c", 1); r.Allowed || !r.Untracked || b.Len() != 3 {
		t.Fatalf("a 4th key at a cap of 3 with no idle key: %+v, Len %d", r, b.Len())
	}
	clk.Add(time.Second) // a and b are idle now, the victim is not
	if r := b.Take("c", 1); !r.Allowed || r.Untracked {
		t.Fatalf("a new key when idle keys can make room: %+v", r)
	}
	if b.Len() != 2 {
		t.Fatalf("Len %d after the sweep at the cap, want 2 (victim and c)", b.Len())
	}
	if r := b.Peek("victim"); r.Remaining != 1 {
		t.Fatalf("the victim's state after the sweep: %+v, want 1 token back after 1 s", r)
	}
}
