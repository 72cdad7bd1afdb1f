package keylimit

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWindowEvictionRaceAdmitsExactly is TestEvictionRaceAdmitsExactly for
// the window types: goroutines hammer a few keys while sweeps run back to
// back. The clock is frozen within a round and jumps past two Periods
// between rounds, so that each key starts each round idle (the sweeper may
// retire it at any moment) and must admit exactly Events in the round: an
// admission recorded in a state that was evicted would show as an extra one
// (or, for a SlidingWindow, an admission made under the lock of a retired
// log).
func TestWindowEvictionRaceAdmitsExactly(t *testing.T) {
	const (
		events = 50
		keys   = 4
		rounds = 100
	)
	type sweeper struct {
		allow func(key int) bool
		sweep func() int
	}
	for _, typ := range []struct {
		name string
		new  func(l Limit, clk *testClock) sweeper
	}{
		{"FixedWindow", func(l Limit, clk *testClock) sweeper {
			lim, _ := NewFixedWindow[int](l, WithClock(clk), WithEvictionInterval(0))
			return sweeper{lim.Allow, func() int { return sweepNow(lim.keyed) }}
		}},
		{"SlidingWindow", func(l Limit, clk *testClock) sweeper {
			lim, _ := NewSlidingWindow[int](l, WithClock(clk), WithEvictionInterval(0))
			return sweeper{lim.Allow, func() int { return sweepNow(lim.keyed) }}
		}},
		{"SlidingCounter", func(l Limit, clk *testClock) sweeper {
			lim, _ := NewSlidingCounter[int](l, WithClock(clk), WithEvictionInterval(0))
			return sweeper{lim.Allow, func() int { return sweepNow(lim.keyed) }}
		}},
	} {
		t.Run(typ.name, func(t *testing.T) {
			clk := newTestClock()
			lim := typ.new(PerHour(events), clk)
			stop := make(chan struct{})
			var sweeps, evicted atomic.Int64
			var sweeping sync.WaitGroup
			sweeping.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						evicted.Add(int64(lim.sweep()))
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
							if lim.allow(k) {
								admitted[k].Add(1)
							}
						}
					})
				}
				wg.Wait()
				for k := range keys {
					if got := admitted[k].Load(); got != events {
						t.Fatalf("round %d key %d: admitted %d, want exactly %d", round, k, got, events)
					}
				}
				clk.Add(2 * time.Hour)
				if round%2 == 0 {
					// Let two sweeps pass, so that this round meets evicted
					// keys (the replace path); odd rounds race with the
					// sweeper.
					for s0 := sweeps.Load(); sweeps.Load() < s0+2; {
						runtime.Gosched()
					}
				}
			}
			close(stop)
			sweeping.Wait()
			if evicted.Load() == 0 {
				t.Fatalf("%d sweeps evicted nothing: the race was not exercised", sweeps.Load())
			}
		})
	}
}
