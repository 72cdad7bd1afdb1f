package keylimit_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// memMaxBytes is the most heap bytes per key each type may take, the key
// included, at the memory test's limit of 10 events.
var memMaxBytes = map[string]float64{
	tokenBucket.name:    80,
	fixedWindow.name:    80,
	slidingWindow.name:  80 + 48 + 80, // 48 bytes of state and 8 per event of the quota
	slidingCounter.name: 80,
}

func heapInUse() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// requireHeapBack requires the heap, once a limiter has forgotten its keys,
// to come back within 10% of empty (what it was with the limiter empty),
// plus 64 KiB of slack for the runtime, and returns it. It measures again
// for up to 5 seconds: what other goroutines (the other tests' evictors,
// the race detector) hold at one instant is not the limiter's, and is gone
// at the next; what the limiter kept would stay.
func requireHeapBack(t *testing.T, empty uint64) uint64 {
	t.Helper()
	bound := float64(empty)*1.10 + 64<<10
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := heapInUse()
		if float64(after) <= bound || time.Now().After(deadline) {
			require.LessOrEqual(t, float64(after), bound,
				"heap after eviction within 10%% of an empty limiter's (plus 64 KiB of slack for the runtime), for 5 s")
			return after
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMemoryPerKeyAndRelease inserts distinct 16-byte keys into each
// limiter type and bounds the heap bytes per key (the key included: the
// test keeps no key, so whatever of it the limiter keeps is counted). Then,
// in a limiter with its evictor on, it lets the same keys go idle and
// requires the heap to come back to within 10% of its baseline, with Len 0.
// It inserts 16,000 keys (a million under -full).
//
// The bytes per key are measured with eviction off: a sweep in progress
// holds on to the map's previous table while the map grows, which would be
// counted too.
func TestMemoryPerKeyAndRelease(t *testing.T) {
	// 16,000 keys are just past a growth of the map's table, as a million
	// are: where a key costs the most (65 B for a bucket here, 66 B at a
	// million; 52 B just before a growth).
	n := sized(16_000, 1_000_000)
	fill := func(t *testing.T, lim limiter) {
		t.Helper()
		var id [8]byte
		var key [16]byte
		refused := 0
		for i := range n {
			binary.BigEndian.PutUint64(id[:], uint64(i))
			hex.Encode(key[:], id[:])
			if !lim.Allow(string(key[:])) {
				refused++
			}
		}
		require.Zero(t, refused, "new keys refused")
		require.Equal(t, n, lim.Stats().Keys)
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			l := keylimit.PerSecond(10)
			// Not k.on: its cleanup would keep the limiter, and its keys,
			// reachable after this measure.
			lim, err := k.new(l, keylimit.WithClock(newFastClock()), keylimit.WithEvictionInterval(0))
			require.NoError(t, err)
			empty := heapInUse()
			fill(t, lim)
			perKey := float64(heapInUse()-empty) / float64(n)
			t.Logf("%s: %d keys, %.1f heap bytes per key, key included", k.name, n, perKey)
			require.LessOrEqual(t, perKey, memMaxBytes[k.name])
			require.NoError(t, lim.Close())
			lim = nil

			clk := newFastClock()
			lim = k.on(t, clk, l, keylimit.WithEvictionInterval(20*time.Millisecond))
			empty = heapInUse()
			fill(t, lim)
			clk.Add(time.Minute) // every key is idle now
			waitFor(t, "the evictor to forget every key", func() bool { return lim.Stats().Keys == 0 })
			after := requireHeapBack(t, empty)
			t.Logf("%s: heap after eviction %d B, empty limiter %d B", k.name, after, empty)
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

// evictionCase is, for one limiter type, when a key whose events are
// admitted goes idle.
type evictionCase struct {
	kind *kind
	// idle returns when a key that admitted n events at t0+at goes idle,
	// for the tests' limit of 2 per 10 s on a clock that starts on a
	// boundary.
	idle func(at time.Duration, n int) time.Duration
}

func evictionCases() []evictionCase {
	window := func(at time.Duration, _ int) time.Duration { return at.Truncate(10*s) + 10*s }
	return []evictionCase{
		{tokenBucket, func(at time.Duration, n int) time.Duration { return at + time.Duration(n)*5*s }},
		{fixedWindow, window},
		{slidingWindow, func(at time.Duration, _ int) time.Duration { return at + 10*s }},
		{slidingCounter, func(at time.Duration, n int) time.Duration { return window(at, n) + 10*s }},
	}
}

// TestKeyCapEvictsOnlyIdleKeys: at the key cap, a new key is admitted
// exactly when a tracked key goes idle, and only the idle keys are
// forgotten. It pins each type's idle time: not 1 ns before, and the
// RetryAfter of an untracked key says when.
func TestKeyCapEvictsOnlyIdleKeys(t *testing.T) {
	for _, c := range evictionCases() {
		t.Run(c.kind.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, keylimit.Per(2, 10*s), keylimit.WithMaxKeys(2), keylimit.WithEvictionInterval(0))
			t0 := mock.Now()
			mock.Set(t0.Add(3 * s))
			require.True(t, lim.Allow("a"))
			mock.Set(t0.Add(5 * s))
			require.True(t, lim.Allow("b"))
			idleA, idleB := c.idle(3*s, 1), c.idle(5*s, 1)

			r := lim.Take("new", 1)
			require.True(t, r.Untracked, "no key is idle at 5 s")
			require.False(t, r.Allowed)
			require.Equal(t, idleA-5*s, r.RetryAfter, "an untracked key learns when a place frees up")

			mock.Set(t0.Add(idleA - 1))
			require.True(t, lim.Take("new", 1).Untracked, "a is idle only at %v", idleA)
			require.Equal(t, 1, lim.Peek("a").Remaining, "a keeps its state until idle")

			mock.Set(t0.Add(idleA))
			r = lim.Take("new", 1)
			require.True(t, r.Allowed)
			require.False(t, r.Untracked, "a went idle at %v and made room", idleA)
			if idleB > idleA {
				require.Equal(t, 2, lim.Stats().Keys, "b is not idle")
				require.True(t, lim.Allow("b"), "b keeps its state: one of its 2 left")
				require.False(t, lim.Allow("b"))
			} else {
				require.Equal(t, 1, lim.Stats().Keys, "b went idle with a")
			}
		})
	}
}

// TestEvictorForgetsIdleKeysOnly runs the background evictor every
// millisecond of real time: keys are never forgotten before they are idle on
// the limiter's clock, and are forgotten once they are.
func TestEvictorForgetsIdleKeysOnly(t *testing.T) {
	for _, c := range evictionCases() {
		t.Run(c.kind.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, keylimit.Per(2, 10*s), keylimit.WithEvictionInterval(time.Millisecond))
			t0 := mock.Now()
			mock.Set(t0.Add(3 * s))
			require.True(t, lim.AllowN("a", 2))
			mock.Set(t0.Add(9 * s))
			require.True(t, lim.Allow("b"))
			idleA, idleB := c.idle(3*s, 2), c.idle(9*s, 1)

			mock.Set(t0.Add(idleA - 1))
			time.Sleep(30 * time.Millisecond) // some 30 sweeps
			require.Equal(t, 2, lim.Stats().Keys, "no key is idle yet")
			require.Equal(t, time.Duration(1), lim.Peek("a").ResetAfter, "a is whole again in 1 ns")

			mock.Set(t0.Add(idleA))
			if idleB > idleA {
				waitFor(t, "a to be forgotten", func() bool { return lim.Stats().Keys == 1 })
				require.Equal(t, 1, lim.Peek("b").Remaining, "b is not idle")
				mock.Set(t0.Add(idleB - 1))
				time.Sleep(30 * time.Millisecond)
				require.Equal(t, 1, lim.Stats().Keys, "b is not idle yet")
				mock.Set(t0.Add(idleB))
			}
			waitFor(t, "every key to be forgotten", func() bool { return lim.Stats().Keys == 0 })
			require.True(t, lim.AllowN("a", 2), "a forgotten key starts afresh")
		})
	}
}

// TestKeyCapUnderAFlood: goroutines flood distinct keys at a cap. Len never
// exceeds the cap, the keys tracked before the flood keep their limits, and
// every refusal of a new key says Untracked.
func TestKeyCapUnderAFlood(t *testing.T) {
	const capacity = 1000
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim := k.on(t, newFastClock(), keylimit.PerHour(3), keylimit.WithMaxKeys(capacity))
			require.True(t, lim.AllowN("victim", 3))
			var tracked, untracked, overCap atomic.Int64
			var mu sync.Mutex
			var unexpected []keylimit.Result
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
							mu.Lock()
							unexpected = append(unexpected, r)
							mu.Unlock()
						}
						if lim.Stats().Keys > capacity {
							overCap.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.Empty(t, unexpected, "Results for a new key neither admitted and tracked nor refused and untracked")
			require.Zero(t, overCap.Load(), "Len exceeded the cap")
			require.EqualValues(t, capacity-1, tracked.Load(), "exactly the free places were taken")
			require.EqualValues(t, 16*500-(capacity-1), untracked.Load())
			require.Equal(t, capacity, lim.Stats().Keys)
			r := lim.Take("victim", 1)
			require.False(t, r.Allowed, "the flood did not reset the victim's limit")
			require.False(t, r.Untracked)
		})
	}
}

func TestAdmitUntracked(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim := k.on(t, newFastClock(), keylimit.PerHour(2), keylimit.WithMaxKeys(1), keylimit.WithAdmitUntracked())
			require.True(t, lim.AllowN("a", 2))
			for range 5 {
				r := lim.Take("b", 1)
				require.Equal(t, keylimit.Result{Allowed: true, Limit: 2, Remaining: 1, Untracked: true}, r)
				require.True(t, lim.Allow("b"), "an untracked key is admitted and not counted")
			}
			require.False(t, lim.Allow("a"), "the tracked key keeps its limit")
			require.Equal(t, 1, lim.Stats().Keys)
		})
	}
}

// BenchmarkAllowDuringEviction measures Allow on existing keys while the
// evictor sweeps a million keys back to back, beside the same without
// sweeps, in one run: the ratio is what a sweep costs the hot path. The limit
// keeps every key in debt for seconds, so sweeps visit all and evict none.
func BenchmarkAllowDuringEviction(b *testing.B) {
	keys, size := benchKeys(1_000_000), "1M"
	if testing.Short() { // CI's smoke run: a million keys take 15 s to set up under -race
		keys, size = benchKeys(10_000), "1e4"
	}
	for _, sweeping := range []bool{false, true} {
		name := "sweeps=off"
		every := time.Duration(0)
		if sweeping {
			name, every = "sweeps=continuous", time.Nanosecond
		}
		b.Run("bucket/keys="+size+"/"+name, func(b *testing.B) {
			lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1000), keylimit.WithEvictionInterval(every))
			require.NoError(b, err)
			defer lim.Close()
			for _, k := range keys {
				lim.Allow(k)
			}
			runAllow(b, lim, keys, "parallel")
		})
	}
}

// TestKeyCapIsLogged: the key cap leaving new keys untracked is logged
// once, however many keys it leaves out, and its end once, when a key is
// tracked again.
func TestKeyCapIsLogged(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := textLogger(&buf)
			lim, mock := k.mock(t, keylimit.PerMinute(1), keylimit.WithMaxKeys(2), keylimit.WithLogger(logger), keylimit.WithEvictionInterval(0))
			require.True(t, lim.Allow("a"))
			require.True(t, lim.Allow("b"))
			for i := range 100 {
				require.False(t, lim.Allow(fmt.Sprint("flood-", i)), "the cap is full of busy keys")
			}
			require.Equal(t, `level=WARN msg="keylimit: the key cap is reached: new keys are not tracked, and the overflow policy decides for them" max_keys=2 admit_untracked=false`+"\n", buf.String())
			buf.Reset()
			mock.Add(k.refill * 2 * time.Minute) // a and b go idle: a sweep makes room
			require.True(t, lim.Allow("c"))
			require.True(t, lim.Allow("d"))
			require.Equal(t, `level=INFO msg="keylimit: the key cap has room again: new keys are tracked" max_keys=2 untracked_so_far=100`+"\n", buf.String())
		})
	}
	_, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithLogger(nil))
	require.EqualError(t, err, "keylimit: WithLogger(nil): leave the option out for slog.Default()")
}

// TestKeyCapChurnIsLoggedOncePerMinute: a limiter at its cap while keys come
// and go starts and ends an episode at nearly every new key; it logs one
// start (and its end) a minute, the next start counting the episodes left
// out, not a line per request.
func TestKeyCapChurnIsLoggedOncePerMinute(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := textLogger(&buf)
			lim, mock := k.mock(t, keylimit.PerSecond(1), keylimit.WithMaxKeys(2), keylimit.WithLogger(logger), keylimit.WithEvictionInterval(0))
			untracked := 0
			for i := range 200 { // a new key every 400 ms, each idle 1 s after it came (× refill)
				r := lim.Take(fmt.Sprint("churn-", i), 1)
				if r.Untracked {
					untracked++
				}
				mock.Add(k.refill * 400 * time.Millisecond)
			}
			require.Positive(t, untracked, "the cap left keys untracked")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			starts := 0
			for _, l := range lines {
				if strings.Contains(l, "the key cap is reached") {
					starts++
				}
			}
			elapsed := 200 * k.refill * 400 * time.Millisecond
			want := int(elapsed/time.Minute) + 1 // one a minute, from the first
			require.Equal(t, want, starts, "starts logged in %v:\n%s", elapsed, buf.String())
			require.LessOrEqual(t, len(lines), 2*want, "the starts and their ends:\n%s", buf.String())
			require.Contains(t, buf.String(), "episodes_not_logged=", "the second start counts those left out")
		})
	}
}
