package schedprobe

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestProbeSeesAMachineBusierThanItsCPUs: with more busy goroutines than
// processors for 200 ms, the probe's goroutine waits for a turn, and the
// probe reports lateness of at least a scheduling quantum's order; an idle
// probe's is below the busy one's.
func TestProbeSeesAMachineBusierThanItsCPUs(t *testing.T) {
	p := Start()
	var wg sync.WaitGroup
	stop := time.Now().Add(200 * time.Millisecond)
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for time.Now().Before(stop) {
			}
		})
	}
	wg.Wait()
	busy := p.Stop()
	if busy <= 0 {
		t.Fatalf("a probe beside %d busy goroutines on %d processors was never late", 4*runtime.GOMAXPROCS(0), runtime.GOMAXPROCS(0))
	}
	t.Logf("late by at most %v beside busy goroutines", busy)
}
