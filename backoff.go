package keylimit

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/keylimit/keylimit/internal/spin"
)

// backoff is what a call that lost a compare-and-swap on a key's state
// does before it tries again (internal/spin, which package adaptive's
// limiter shares).
type backoff = spin.Backoff

// holdFirst and holdMost are the bounds of holderWait's waits, and of a
// Concurrency's acquisition after a lost CAS, four times backoff's: a
// SlidingWindow's writer moves two lines, not one (its lock and position,
// and the entry it writes, which in a full log is the one it judged by),
// and a hold writes its key's word twice, so the winner's run of calls must
// be longer to pay for them.
const (
	holdFirst = 4 * spin.First
	holdMost  = 4 * spin.Most
)

// holderWait paces a caller of a key whose state is a lock (a
// SlidingWindow's log): it waits as backoff does, and when the lock stays
// held by one writer far longer than a writer holds it, it parks until that
// writer releases it. A writer holds the lock for a few stores, so one seen
// holding it that long has lost its thread's CPU to the operating system
// (more threads than cores), and until it runs again nobody can write the
// key: spinning, or napping and waking to look again, would keep the CPU
// from it, where a parked waiter leaves it the CPU until the lock is free.
type holderWait struct {
	bo    backoff
	held  uint64        // the odd seq last seen, or 0
	since time.Duration // since spinEpoch, when held was first seen
}

// holderOff is how long one writer holds the lock before its waiters
// park: about a hundred times what it takes when it runs.
const holderOff = 2 * time.Microsecond

// wait waits before another try; seq is the value of the lock word last
// seen.
func (w *holderWait) wait(word *atomic.Uint64, seq uint64) {
	if seq&1 != 0 {
		now := time.Since(spin.SpinEpoch)
		switch {
		case seq != w.held:
			w.held, w.since = seq, now
		case now-w.since > holderOff:
			parkWhileHeld(word, seq)
			w.held = 0
			return
		}
	}
	w.bo.WaitWithin(holdFirst, holdMost)
}

// parking is where waiters park while a lock's holder is off its CPU: a
// fixed set of queues, the lock word's address picking one, so that a lock
// costs no memory for them. The waiters of two words that share a queue are
// woken when either is released, and look again.
var parking [parkQueues]parkQueue

// parkQueues is how many queues parking has.
const parkQueues = 64

// parkQueue is one queue of parking, a cache line of its own.
type parkQueue struct {
	waiters atomic.Int32  // parked, or about to be: an unlock reads it
	mu      sync.Mutex    // guards wake
	wake    chan struct{} // closed to wake the parked waiters; nil until one parks
	_       [40]byte
}

// queueOf returns the queue of the lock word at word.
func queueOf(word *atomic.Uint64) *parkQueue {
	return &parking[uintptr(unsafe.Pointer(word))>>6%parkQueues]
}

// parkMost bounds a park, in ns, 0 meaning a millisecond: a wake is never
// lost (see parkWhileHeld), so only a holder that stays off its CPU this
// long makes its waiters look again. A variable for the tests, which make
// a lost wake hang.
var parkMost atomic.Int64

// parkWhileHeld parks the calling goroutine until the lock word at word no
// longer holds seq, or parkMost passes.
func parkWhileHeld(word *atomic.Uint64, seq uint64) {
	q := queueOf(word)
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	q.mu.Lock()
	// Both sequentially consistent: either this load sees the unlock's
	// store, or the unlock's load of waiters, after its store, sees this
	// waiter and closes the channel taken here.
	if word.Load() != seq {
		q.mu.Unlock()
		return
	}
	if q.wake == nil {
		q.wake = make(chan struct{})
	}
	wake := q.wake
	q.mu.Unlock()
	most := time.Duration(parkMost.Load())
	if most == 0 {
		most = time.Millisecond
	}
	t := time.NewTimer(most)
	select {
	case <-wake:
	case <-t.C:
	}
	t.Stop()
}

// parked reports whether a waiter may be parked on the queue of the lock
// word at word: an unlock, after it stored the released value, then
// unparks them. Inlined: one load.
func parked(word *atomic.Uint64) bool { return queueOf(word).waiters.Load() != 0 }

// unpark wakes the waiters parked on the queue of the lock word at word.
func unpark(word *atomic.Uint64) {
	q := queueOf(word)
	q.mu.Lock()
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
	q.mu.Unlock()
}
