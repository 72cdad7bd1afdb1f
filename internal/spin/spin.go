// Package spin paces a caller that lost a compare-and-swap on a key's
// state to another caller of the same key: keylimit's limiters and package
// adaptive's wait the same way.
package spin

import (
	"math/rand/v2"
	"runtime"
	"time"
)

// Backoff paces a caller that lost a compare-and-swap on a key's state to
// another caller of the same key: before it tries again, it waits a random
// time, below a bound that doubles with each loss of the same call, from
// First up to Most. Meanwhile the winner, whose cache holds
// the key's line, decides its next calls without that line moving between
// CPUs. On one hot key this turns a CAS loop, whose cost under contention
// is a cache-line transfer or two per call (more on a CPU where a transfer
// is dear), into runs of calls at the cost of one alone (see keylimit's
// DESIGN.md, "One hot key"). A call that loses no CAS never waits.
//
// The wait spins on the system's monotonic clock, never the limiter's (an
// injected clock may stand still) and never the key's state: spinning on
// the state would bring the line back at every read.
type Backoff struct {
	bound int64 // ns: the next wait is in [bound/2, bound); 0 before the first
}

const (
	// First is the bound of the first wait, in ns: a few calls of
	// the winner (an admission alone takes about 50 ns) and more than a
	// cache-line transfer between sockets (about 100-200 ns).
	First = 256
	// Most is the greatest bound, in ns: a call waits at most
	// about this long for each CAS it loses.
	Most = 4096
)

// SpinEpoch is where Wait measures from: time.Since on it reads only the
// monotonic clock.
var SpinEpoch = time.Now()

// Wait waits before another try.
func (b *Backoff) Wait() { b.WaitWithin(First, Most) }

// WaitWithin is Wait with bounds first and most.
func (b *Backoff) WaitWithin(first, most int64) {
	if b.bound == most {
		// Lost five times over: many callers want the key. Let any other
		// goroutine that can run have this processor first.
		runtime.Gosched()
	}
	b.bound = min(max(2*b.bound, first), most)
	d := time.Duration(b.bound/2 + rand.Int64N(b.bound/2))
	for start := time.Since(SpinEpoch); time.Since(SpinEpoch)-start < d; {
	}
}
