package keylimit

import (
	"math/rand/v2"
	"runtime"
	"time"
)

// backoff paces a caller that lost a compare-and-swap on a key's state to
// another caller of the same key: before it tries again, it waits a random
// time, below a bound that doubles with each loss of the same call, from
// backoffFirst up to backoffMost. Meanwhile the winner, whose cache holds
// the key's line, decides its next calls without that line moving between
// CPUs. On one hot key this turns a CAS loop, whose cost under contention
// is a cache-line transfer or two per call (more on a CPU where a transfer
// is dear), into runs of calls at the cost of one alone (see DESIGN.md,
// "One hot key"). A call that loses no CAS never waits.
//
// The wait spins on the system's monotonic clock, never the limiter's (an
// injected clock may stand still) and never the key's state: spinning on
// the state would bring the line back at every read.
type backoff struct {
	bound int64 // ns: the next wait is in [bound/2, bound); 0 before the first
}

const (
	// backoffFirst is the bound of the first wait, in ns: a few calls of
	// the winner (an admission alone takes about 50 ns) and more than a
	// cache-line transfer between sockets (about 100-200 ns).
	backoffFirst = 256
	// backoffMost is the greatest bound, in ns: a call waits at most
	// about this long for each CAS it loses.
	backoffMost = 4096
	// holdFirst and holdMost are the bounds of holderWait's waits, four
	// times backoff's: a SlidingWindow's writer moves two lines, not one
	// (its lock and position, and the entry it writes, which in a full log
	// is the one it judged by), so its run of calls must be longer to pay
	// for them.
	holdFirst = 4 * backoffFirst
	holdMost  = 4 * backoffMost
)

// spinEpoch is where wait measures from: time.Since on it reads only the
// monotonic clock.
var spinEpoch = time.Now()

// wait waits before another try.
func (b *backoff) wait() { b.waitWithin(backoffFirst, backoffMost) }

// waitWithin is wait with bounds first and most.
func (b *backoff) waitWithin(first, most int64) {
	if b.bound == most {
		// Lost five times over: many callers want the key. Let any other
		// goroutine that can run have this processor first.
		runtime.Gosched()
	}
	b.bound = min(max(2*b.bound, first), most)
	d := time.Duration(b.bound/2 + rand.Int64N(b.bound/2))
	for start := time.Since(spinEpoch); time.Since(spinEpoch)-start < d; {
	}
}

// holderWait paces a caller of a key whose state is a lock (a
// SlidingWindow's log): it waits as backoff does, and when the lock stays
// held by one writer far longer than a writer holds it, it sleeps. A writer
// holds the lock for a few stores, so one seen holding it that long has
// lost its thread's CPU to the operating system (more goroutines than
// cores), and until it runs again nobody can write the key: spinning would
// keep the CPU from it, where a sleep gives it back.
type holderWait struct {
	bo    backoff
	held  uint64        // the odd seq last seen, or 0
	since time.Duration // since spinEpoch, when held was first seen
}

const (
	// holderOff is how long, in ns, one writer holds the lock before its
	// waiters sleep: about a thousand times what it takes when it runs.
	holderOff = 20 * time.Microsecond
	// holderNap is how long they sleep, at least (a sleep of a goroutine
	// whose processor then has nothing to run lasts about a millisecond on
	// Linux, the poller's resolution).
	holderNap = 20 * time.Microsecond
)

// wait waits before another try; seq is the lock's value last seen.
func (w *holderWait) wait(seq uint64) {
	if seq&1 != 0 {
		now := time.Since(spinEpoch)
		switch {
		case seq != w.held:
			w.held, w.since = seq, now
		case now-w.since > holderOff:
			time.Sleep(holderNap)
			w.since = time.Since(spinEpoch)
			return
		}
	}
	w.bo.waitWithin(holdFirst, holdMost)
}
