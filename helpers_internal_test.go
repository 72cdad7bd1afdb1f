package keylimit

// The helpers of the package's internal tests (package keylimit; the
// external tests, package keylimit_test, keep theirs in helpers_test.go):
// every function or type that more than one internal test uses lives here;
// what one test alone uses sits beside it.
//
// Assertions: testify's require, on the test's goroutine only; other
// goroutines count or collect, and the test's goroutine asserts afterwards.

import (
	"flag"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// testClock is a goroutine-safe clock moved by hand; only Now is used.
type testClock struct {
	clock.Clock
	ns atomic.Int64
}

// newTestClock returns a testClock at time.Unix(1e9, 0).
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

// sweepNow runs a sweep of k now, as the sweeper would, and returns how
// many keys it evicted.
func sweepNow[K comparable, S any](k *shard[K, S]) int {
	k.sweepMu.Lock()
	defer k.sweepMu.Unlock()
	return k.sweep()
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
	// stopSweeper runs at the end, or when a check fails, so that the
	// sweeper does not outlive the test.
	stopSweeper := sync.OnceFunc(func() { close(stop); sweeper.Wait() })
	defer stopSweeper()
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
			require.Equal(t, quota, admitted[k].Load(), "round %d key %d: admitted", round, k)
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
	stopSweeper()
	require.NotZero(t, evicted.Load(), "keys evicted by %d sweeps; none, and the race was not exercised", sweeps.Load())
	t.Logf("%d sweeps, %d evictions during %d rounds", sweeps.Load(), evicted.Load(), rounds)
}
