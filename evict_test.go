package keylimit_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// memLimiter is what the memory test needs of a limiter.
type memLimiter interface {
	keylimit.Limiter[string]
	Len() int
	Close() error
}

// memTypes lists every limiter type the memory test measures, with the most
// bytes per key it may take (including the key).
var memTypes = []struct {
	name   string
	maxB   float64
	newLim func(l keylimit.Limit, opts ...keylimit.Option) (memLimiter, error)
}{
	{"TokenBucket", 80, func(l keylimit.Limit, opts ...keylimit.Option) (memLimiter, error) {
		return keylimit.NewTokenBucket[string](l, opts...)
	}},
	{"FixedWindow", 80, func(l keylimit.Limit, opts ...keylimit.Option) (memLimiter, error) {
		return keylimit.NewFixedWindow[string](l, opts...)
	}},
	// 48 bytes of state and 8 per event of the quota (10 here).
	{"SlidingWindow", 80 + 48 + 80, func(l keylimit.Limit, opts ...keylimit.Option) (memLimiter, error) {
		return keylimit.NewSlidingWindow[string](l, opts...)
	}},
	{"SlidingCounter", 80, func(l keylimit.Limit, opts ...keylimit.Option) (memLimiter, error) {
		return keylimit.NewSlidingCounter[string](l, opts...)
	}},
}

func heapInUse() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// waitFor polls cond until it holds, failing the test after a long real-time
// deadline. It waits for background work (the evictor); it asserts nothing
// about speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMemoryPerKeyAndRelease inserts a million distinct 16-byte keys into
// each limiter type and reports the heap bytes per key (the key included:
// the test keeps no key, so whatever of it the limiter keeps is counted).
// Then, in a limiter with its evictor on, it lets the same keys go idle and
// requires the heap to come back to within 10% of its baseline, with Len 0.
//
// The bytes per key are measured with eviction off: a sweep in progress
// holds on to the map's previous table while the map grows, which would be
// counted too.
func TestMemoryPerKeyAndRelease(t *testing.T) {
	n := 1_000_000
	if raceEnabled {
		n = 200_000 // the race detector is slow; per-key bytes are the same
	}
	fill := func(t *testing.T, lim memLimiter) {
		var key [16]byte
		for i := range n {
			copy(key[:], fmt.Sprintf("%016x", i))
			if !lim.Allow(string(key[:])) {
				t.Fatalf("key %d refused", i)
			}
		}
		require.Equal(t, n, lim.Len())
	}
	for _, typ := range memTypes {
		t.Run(typ.name, func(t *testing.T) {
			l := keylimit.PerSecond(10)
			lim, err := typ.newLim(l, keylimit.WithClock(newFastClock()), keylimit.WithEvictionInterval(0))
			require.NoError(t, err)
			empty := heapInUse()
			fill(t, lim)
			perKey := float64(heapInUse()-empty) / float64(n)
			t.Logf("%s: %d keys, %.1f heap bytes per key, key included", typ.name, n, perKey)
			require.LessOrEqual(t, perKey, typ.maxB)
			lim.Close()
			lim = nil

			clk := newFastClock()
			lim, err = typ.newLim(l, keylimit.WithClock(clk), keylimit.WithEvictionInterval(20*time.Millisecond))
			require.NoError(t, err)
			defer lim.Close()
			empty = heapInUse()
			fill(t, lim)
			clk.Add(time.Minute) // every key is idle now
			waitFor(t, "the evictor to forget every key", func() bool { return lim.Len() == 0 })
			after := heapInUse()
			t.Logf("%s: heap after eviction %d B, empty limiter %d B", typ.name, after, empty)
			require.LessOrEqual(t, float64(after), float64(empty)*1.10+64<<10,
				"heap after eviction within 10%% of an empty limiter's (plus 64 KiB of slack for the runtime)")
		})
	}
}

// TestForgottenCloseDoesNotLeakTheEvictor: a limiter dropped without Close
// stops its evictor goroutine once it is garbage.
func TestForgottenCloseDoesNotLeakTheEvictor(t *testing.T) {
	runtime.GC()
	before := runtime.NumGoroutine()
	func() {
		for range 20 {
			lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithEvictionInterval(time.Millisecond))
			require.NoError(t, err)
			lim.Allow("k")
		}
	}()
	require.GreaterOrEqual(t, runtime.NumGoroutine(), before+20, "each limiter runs an evictor")
	waitFor(t, "the evictors of unreachable limiters to stop", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= before
	})

	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1))
	require.NoError(t, err)
	require.Equal(t, before+1, runtime.NumGoroutine())
	require.NoError(t, lim.Close())
	require.NoError(t, lim.Close(), "Close twice is fine")
	waitFor(t, "Close to stop the evictor", func() bool { return runtime.NumGoroutine() <= before })
	require.True(t, lim.Allow("k"), "a closed limiter still answers")

	off, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithEvictionInterval(0))
	require.NoError(t, err)
	require.Equal(t, before, runtime.NumGoroutine(), "WithEvictionInterval(0) starts no goroutine")
	off.Close()
}

func TestEvictionOptionErrors(t *testing.T) {
	_, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithEvictionInterval(-time.Second))
	require.EqualError(t, err, "keylimit: eviction interval -1s is negative")
	_, err = keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithMaxKeys(0))
	require.EqualError(t, err, "keylimit: max keys 0 is below 1")
}

func TestEvictorForgetsIdleKeysOnly(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(10), keylimit.WithClock(clk), keylimit.WithEvictionInterval(time.Millisecond))
	require.NoError(t, err)
	defer lim.Close()
	lim.AllowN("busy", 10) // full again in 10 s
	lim.Allow("light")     // in 1 s
	clk.Add(2 * time.Second)
	waitFor(t, "the evictor to forget the idle key", func() bool { return lim.Len() == 1 })
	time.Sleep(20 * time.Millisecond) // many more sweeps
	require.Equal(t, 1, lim.Len())
	require.Equal(t, 2, lim.Peek("busy").Remaining, "the busy key kept its state")
}

// TestKeyCapUnderAFlood: goroutines flood distinct keys at a cap. Len never
// exceeds the cap, the keys tracked before the flood keep their limits, and
// every refusal of a new key says Untracked.
func TestKeyCapUnderAFlood(t *testing.T) {
	const capacity = 1000
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(3), keylimit.WithClock(clk), keylimit.WithMaxKeys(capacity))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("victim", 3))
	var tracked, untracked, overCap atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				r := lim.Take(fmt.Sprintf("attacker-%d-%d", g, i), 1)
				switch {
				case r.Allowed && !r.Untracked:
					tracked.Add(1)
				case !r.Allowed && r.Untracked:
					untracked.Add(1)
				default:
					t.Errorf("unexpected Result for a new key: %+v", r)
				}
				if lim.Len() > capacity {
					overCap.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, overCap.Load(), "Len exceeded the cap")
	require.EqualValues(t, capacity-1, tracked.Load(), "exactly the free places were taken")
	require.EqualValues(t, 16*500-(capacity-1), untracked.Load())
	require.Equal(t, capacity, lim.Len())
	r := lim.Take("victim", 1)
	require.False(t, r.Allowed, "the flood did not reset the victim's limit")
	require.False(t, r.Untracked)
}

func TestAdmitUntracked(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(2), keylimit.WithClock(clk), keylimit.WithMaxKeys(1), keylimit.WithAdmitUntracked())
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("a", 2))
	for range 5 {
		r := lim.Take("b", 1)
		require.Equal(t, keylimit.Result{Allowed: true, Limit: 2, Remaining: 1, Untracked: true}, r)
		require.True(t, lim.Allow("b"), "an untracked key is admitted and not counted")
	}
	require.False(t, lim.Allow("a"), "the tracked key keeps its limit")
	require.Equal(t, 1, lim.Len())
}

// BenchmarkAllowDuringEviction measures Allow on existing keys while the
// evictor sweeps a million keys back to back, beside the same without
// sweeps, in one run: the ratio is what a sweep costs the hot path. The limit
// keeps every key in debt for seconds, so sweeps visit all and evict none.
func BenchmarkAllowDuringEviction(b *testing.B) {
	keys := benchKeys(1_000_000)
	for _, sweeping := range []bool{false, true} {
		name := "sweeps=off"
		every := time.Duration(0)
		if sweeping {
			name, every = "sweeps=continuous", time.Nanosecond
		}
		b.Run("bucket/keys=1M/"+name, func(b *testing.B) {
			lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1000), keylimit.WithEvictionInterval(every))
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			for _, k := range keys {
				lim.Allow(k)
			}
			runAllow(b, lim, keys, "parallel")
		})
	}
}
