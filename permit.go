package keylimit

import (
	"context"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ConcurrencyLimiter bounds how many slots of each key are held at once:
// Concurrency in memory, adaptive.Limiter, whose limits find themselves,
// and limiters of the same contract in other modules. A rate limit bounds how often; this bounds how many at once.
//
// It is not a Limiter: Take would acquire slots with nothing to give them
// back by, so an acquisition returns a Permit, and the slots are held until
// its Release.
//
// Implementations are safe for concurrent use.
type ConcurrencyLimiter[K comparable] interface {
	// TryAcquire acquires n of key's slots if they are free now and no
	// Acquire of key is waiting, without waiting, and reports the decision
	// and the key's state after it. A refused call holds nothing, and its
	// Permit is the zero Permit. n == 0 is allowed and holds nothing; n < 0,
	// or n above the limit, can never pass (RetryAfter InfDuration).
	TryAcquire(key K, n int) (Permit, Result)
	// Acquire acquires n of key's slots, waiting under ctx until they are
	// free; waiters of a key are served first come, first served. It fails
	// at once, holding nothing, if ctx has ended or n can never pass
	// (ErrExceedsLimit), and returns ctx's error, wrapped and holding
	// nothing, if ctx ends first.
	Acquire(ctx context.Context, key K, n int) (Permit, error)
	// Peek reports key's state now, holding nothing. Its Allowed says
	// whether TryAcquire(key, 1) would pass.
	Peek(key K) Result
}

var _ ConcurrencyLimiter[string] = (*Concurrency[string])(nil)

// Permit is the slots one acquisition holds, until Release gives them back.
// It is a small value: copies of it are the same permit, and only the first
// Release of any copy gives the slots back, so a second Release frees
// nothing. The zero Permit, a refused acquisition's, holds nothing.
type Permit struct {
	// h is the acquisition's record and gen the generation it was handed
	// out at: the record goes back to a pool at the first Release, and the
	// next acquisition that takes it hands it out at gen + 1, so the
	// Release of a stale copy finds another generation and does nothing
	// (a permit on its key's own record carries its slots in gen too: see
	// permitOwn). A Permit is two words and the record is pooled, so an acquisition
	// allocates nothing.
	h   *hold
	gen uint64
}

// Release gives back the slots the permit holds, once: a later Release of
// it or of any copy does nothing, nor does the Release of a permit whose
// slots a longest hold (WithMaxHold) took back. It never blocks.
func (p Permit) Release() {
	if p.h != nil {
		p.h.release(p.gen)
	}
}

// Drop gives back the slots the permit holds, as Release does, and tells
// an adaptive.Limiter that the call failed from overload: it timed out,
// was refused, or was shed downstream. The limiter counts the call's
// latency and the drop, and lowers its limits. For any other limiter's
// permit it is Release.
func (p Permit) Drop() {
	if p.h == nil {
		return
	}
	if p.h.kind == holdLent {
		asLentHold(p.h).release(p.gen, true)
		return
	}
	p.h.release(p.gen)
}

// NewPermit returns a Permit whose first Release calls release; later
// Releases of it and its copies do nothing. It is for ConcurrencyLimiter
// implementations outside this package; it allocates.
func NewPermit(release func()) Permit {
	f := &funcHold{fn: release}
	return Permit{h: &f.hold}
}

// funcHold is NewPermit's record: a hold with no core, and its function.
type funcHold struct {
	hold // first: a *hold of a funcHold is a *funcHold
	fn   func()
}

// hold is one acquisition's record. A pooled record's fields other than
// gen are written by the acquisition that takes it from holdPool, before
// the Permit is handed out, and read by the Release that wins gen's CAS,
// before it gives the record back; a Release that loses reads nothing
// else. A key's own record is read before its CAS, by every Release of
// it, so it keeps nothing the next acquisition writes plainly: see
// concState.own. It is 40 bytes, so that a key's state, which embeds one,
// is 64.
type hold struct {
	// gen is the generation of the Permit that holds the record now; the
	// first Release of that Permit moves it on by CAS. Its multiples of 64
	// are timed, for the estimate of hold times (concCore.permit).
	gen  atomic.Uint64
	core *concCore // nil for NewPermit's (a funcHold)
	st   *concState
	// at is the acquisition's time: always with a longest hold (it gives
	// the epoch), else only if timed.
	at   int64
	n    int32 // slots held, at most MaxConcurrency
	kind uint8 // holdConcurrency, or holdLent for a *lentHold; set when the record is made, never changed
}

// The kinds of hold record.
const (
	holdConcurrency = iota // a Concurrency's, or NewPermit's (core nil)
	holdLent               // a lent store's (package adaptive's limiter's): a *lentHold
)

// holdPool recycles the records of released holds, but for each key's own
// (concState.own). A record another goroutine still has a stale Permit of
// is safe to reuse: see Permit.
var holdPool = sync.Pool{New: func() any { return new(hold) }}

func (h *hold) release(gen uint64) {
	if gen&permitOwn != 0 {
		// A key's own record: its core and st never change, its
		// generation is in the key's word, and gen carries the slots.
		h.core.releaseOwn(h.st, gen&^permitOwn)
		return
	}
	if h.kind == holdLent {
		asLentHold(h).release(gen, false)
		return
	}
	if !h.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	if h.core == nil {
		(*funcHold)(unsafe.Pointer(h)).fn()
		return
	}
	// Read before the record goes back to the pool, for the next
	// acquisition; a pooled record keeps neither the limiter nor the key
	// alive.
	c, st, n, at := h.core, h.st, int64(h.n), h.at
	h.core, h.st = nil, nil
	holdPool.Put(h)
	timed := gen%64 == 0
	if !timed && c.maxHold == 0 {
		// The first try of the common case, written out: untimed, no
		// longest hold, nobody waiting (concCore.release is the rest).
		if w := st.word.Load(); w&(concWaiters|concRetired) == 0 && st.word.CompareAndSwap(w, w-uint64(n)) {
			if c.capped && c.held(w) == n {
				c.idle()
			}
			return
		}
	}
	c.release(st, n, at, timed)
}
