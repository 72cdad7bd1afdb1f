// Package schedprobe measures how late the machine runs a goroutine that
// asked to wake, for tests that must read real time: such a test derives
// its tolerance from what the probe saw during the test, instead of a fixed
// margin that a loaded machine (CI right after a session, two busy loops
// per core) exceeds.
package schedprobe

import (
	"sync"
	"sync/atomic"
	"time"
)

// tick is how often the probe asks to wake.
const tick = time.Millisecond

// Probe is a goroutine that sleeps for tick over and over and records the
// most it woke late.
type Probe struct {
	worst atomic.Int64 // ns: the most a wake came after its time
	stop  chan struct{}
	done  sync.WaitGroup
}

// Start starts a Probe.
func Start() *Probe {
	p := &Probe{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		for {
			at := time.Now()
			select {
			case <-p.stop:
				return
			case <-time.After(tick):
			}
			if late := time.Since(at) - tick; late > time.Duration(p.worst.Load()) {
				p.worst.Store(int64(late))
			}
		}
	}()
	return p
}

// Worst returns the most the probe has woken late so far.
func (p *Probe) Worst() time.Duration { return time.Duration(p.worst.Load()) }

// Stop stops the probe and returns the most it woke late.
func (p *Probe) Stop() time.Duration {
	close(p.stop)
	p.done.Wait()
	return p.Worst()
}
