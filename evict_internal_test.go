package keylimit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// These tests call sweep directly, so that "at any eviction interval" means
// what it says: a sweep after every single step.

// TestEvictionNeverChangesADecision runs the same random workload on two
// buckets, one swept after every step and one never, and requires every
// Result to be identical. Keys do get evicted along the way.
func TestEvictionNeverChangesADecision(t *testing.T) {
	for _, l := range []Limit{PerSecond(4).WithBurst(3), PerMinute(10), Per(7, 330*time.Millisecond).WithBurst(2)} {
		clk := newTestClock()
		swept, err := NewTokenBucket[int](l, WithClock(clk), WithEvictionInterval(0))
		require.NoError(t, err, "%v: NewTokenBucket", l)
		kept, _ := NewTokenBucket[int](l, WithClock(clk), WithEvictionInterval(0))
		rng := rand.New(rand.NewPCG(1, uint64(l.Events)))
		evicted := 0
		for step := range 20_000 {
			key := rng.IntN(5)
			switch op := rng.IntN(10); {
			case op < 3:
				clk.Add(time.Duration(rng.Int64N(int64(l.interval()))))
			case op < 8:
				n := rng.IntN(l.BurstSize()) + 1
				a, b := swept.Take(key, n), kept.Take(key, n)
				require.Equal(t, b, a, "%v step %d: Take(%d, %d) with eviction (actual) and without (expected)", l, step, key, n)
			default:
				a, b := swept.Peek(key), kept.Peek(key)
				require.Equal(t, b, a, "%v step %d: Peek(%d) with eviction (actual) and without (expected)", l, step, key)
			}
			evicted += sweepNow(swept.keys)
		}
		require.GreaterOrEqual(t, evicted, 100, "%v: evictions; fewer, and the test did not exercise eviction", l)
		require.Equal(t, 5, kept.Stats().Keys, "%v: Len without eviction", l)
		require.LessOrEqual(t, swept.Stats().Keys, 5, "%v: Len with eviction", l)
	}
}

// TestExhaustedKeyIsNotEvictedBeforeRefill: an exhausted key survives every
// sweep until its bucket is full again, and goes at the first sweep after.
func TestExhaustedKeyIsNotEvictedBeforeRefill(t *testing.T) {
	clk := newTestClock()
	l := PerSecond(10).WithBurst(20) // full again 2 s after exhaustion
	b, _ := NewTokenBucket[string](l, WithClock(clk), WithEvictionInterval(0))
	require.True(t, b.AllowN("k", 20), "a new key's burst")
	for elapsed := time.Duration(0); elapsed < 2*time.Second; elapsed += time.Millisecond {
		require.Zero(t, sweepNow(b.keys), "at %v after exhaustion: keys a sweep evicted", elapsed)
		require.Equal(t, 1, b.Stats().Keys, "at %v after exhaustion: Len after a sweep", elapsed)
		clk.Add(time.Millisecond)
	}
	require.Equal(t, 1, sweepNow(b.keys), "once full: keys a sweep evicted")
	require.Zero(t, b.Stats().Keys, "once full: Len after a sweep")
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

// TestKeyCapSweepsOnlyIdleKeys: at the cap a new key evicts idle keys and
// never a key still in use.
func TestKeyCapSweepsOnlyIdleKeys(t *testing.T) {
	clk := newTestClock()
	b, _ := NewTokenBucket[string](PerSecond(1).WithBurst(2), WithClock(clk), WithEvictionInterval(0), WithMaxKeys(3))
	b.AllowN("victim", 2) // exhausted: full again in 2 s
	b.Allow("a")          // full again in 1 s
	b.Allow("b")
	r := b.Take("c", 1)
	require.False(t, r.Allowed, "a 4th key at a cap of 3 with no idle key: allowed, in %+v", r)
	require.True(t, r.Untracked, "a 4th key at a cap of 3 with no idle key: untracked, in %+v", r)
	require.Equal(t, 3, b.Stats().Keys, "Len after a 4th key at a cap of 3 with no idle key")
	clk.Add(time.Second) // a and b are idle now, the victim is not
	r = b.Take("c", 1)
	require.True(t, r.Allowed, "a new key when idle keys can make room: allowed, in %+v", r)
	require.False(t, r.Untracked, "a new key when idle keys can make room: untracked, in %+v", r)
	require.Equal(t, 2, b.Stats().Keys, "Len after the sweep at the cap (victim and c)")
	r = b.Peek("victim")
	require.Equal(t, 1, r.Remaining, "the victim's Remaining after the sweep, 1 token back after 1 s, in %+v", r)
}
