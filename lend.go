package keylimit

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/keystore"
)

// Package adaptive's limiter stands on this package's keyed store, evictor,
// clock and pooled Permit records, as the limiters here do; they are
// unexported, and stay so, and keylimit lends them through
// internal/keystore.Lend. The borrower hashes its keys (it alone knows their
// type) and makes its keys' states; the store keeps them as opaque pointers.
func init() {
	keystore.Lend = lend
}

// lend is keystore.Lend: a shard keyed by the borrower's hashes, its
// evictor started with the owner it returns.
func lend(opts any, hooks keystore.Hooks) (store, owner any, capped bool, err error) {
	o, err := buildOptions(opts.([]Option))
	if err != nil {
		return nil, nil, false, err
	}
	s := newShard(o, stateHooks[uint64, lentState]{
		newState: func(uint64) *lentState { return (*lentState)(hooks.New()) },
		retireIfIdle: func(p *lentState, now int64) (bool, int64) {
			return hooks.RetireIfIdle(unsafe.Pointer(p), now)
		},
	})
	// The owner is held by the borrower's limiter alone, never by the
	// store or the hooks, which the evictor's goroutine holds: once the
	// limiter is unreachable, so is the owner, and its cleanup stops the
	// goroutine.
	own := &lentOwner{}
	own.evictor = startEvictor(own, s, o, 0)
	return lentStore{s}, own, o.maxKeys > 0, nil
}

// lentState stands for a borrower's key state, which its hooks make: a
// *lentState points to one, and is never read here.
type lentState byte

// lentOwner stops a lent store's evictor.
type lentOwner struct{ evictor *evictor }

// Close stops the evictor; it returns nil.
func (o *lentOwner) Close() error {
	o.evictor.close()
	return nil
}

// lentStore is a lent shard. Its methods are exported only to meet the
// borrower's interface (package adaptive's store); the type is not. h is
// always the borrower's hash of a key: the shard's map is keyed by it as it
// is, never hashed again.
type lentStore struct{ s *shard[uint64, lentState] }

// LoadOrCreate returns the state of the key of hash h, creating it if it is
// missing, or nil if the key cap leaves the key untracked.
func (l lentStore) LoadOrCreate(h uint64) unsafe.Pointer {
	if p := l.s.lookup(h); p != nil {
		return unsafe.Pointer(p)
	}
	return unsafe.Pointer(l.s.create(h, h))
}

// Load returns the state of the key of hash h, or nil.
func (l lentStore) Load(h uint64) unsafe.Pointer { return unsafe.Pointer(l.s.lookup(h)) }

// Replace is shard.replace: it swaps the retired state old of the key of
// hash h for a fresh one.
func (l lentStore) Replace(h uint64, old unsafe.Pointer) unsafe.Pointer {
	return unsafe.Pointer(l.s.replaceAt(h, h, (*lentState)(old)))
}

// Untracked is the Result of a request of n for a key the key cap leaves
// untracked, quota the Result's Limit (shard.untracked).
func (l lentStore) Untracked(quota, n int) Result { return l.s.untracked(quota, n) }

// Impossible is the Result of a request that needs no decision, from r, a
// Peek of its key (impossible).
func (l lentStore) Impossible(r Result, n int) Result { return impossible(r, n) }

// Admits counts a decision of verdict v for Stats and reports whether it
// admits (shardStats.admits).
func (l lentStore) Admits(v keystore.Verdict) bool { return l.s.counts.admits(v, l.s.overflow) }

// Stats is what the store has counted: keys, evictions, decisions.
func (l lentStore) Stats() Stats { return l.s.stats() }

// Now is the store's time (timeSource.now).
func (l lentStore) Now() int64 { return l.s.clock.now() }

// Timers is the clock timers come from: WithClock's, or the system's.
func (l lentStore) Timers() clock.Clock { return l.s.clock.timers }

// Counted reports that decisions are counted (WithStats): without it, only
// an untracked key's decision is counted, and Admits need not be called for
// the others.
func (l lentStore) Counted() bool { return l.s.counts.decisions != nil }

// NextIdle is the shard's nextIdle: storing keystore.MinTime in it says
// that a key went idle, so that a sweep at the key cap may find room.
func (l lentStore) NextIdle() *atomic.Int64 { return &l.s.nextIdle }

// Permit hands out a Permit of n slots of the borrower's state st of its
// core, acquired now: its first Release or Drop calls keystore.Release
// once. It allocates nothing (the record is pooled).
func (l lentStore) Permit(core, st unsafe.Pointer, n int64) Permit {
	h := lentHoldPool.Get().(*lentHold)
	h.owner, h.state, h.n, h.at = core, st, int32(n), l.s.clock.now()
	return Permit{h: &h.hold, gen: h.gen.Load()}
}

// lentHold is a lent store's acquisition record: a hold (its gen, n and at)
// and the borrower's core and state it holds slots of. Pooled; a Release
// reads its fields only after its CAS on gen won, as for a Concurrency's.
type lentHold struct {
	hold         // first: a *hold of kind holdLent is a *lentHold
	owner, state unsafe.Pointer
}

var lentHoldPool = sync.Pool{New: func() any {
	h := new(lentHold)
	h.kind = holdLent
	return h
}}

// release gives back the slots of the Permit of generation gen, once, as a
// success or dropped.
func (h *lentHold) release(gen uint64, drop bool) {
	if !h.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	core, st, n, at := h.owner, h.state, int64(h.n), h.at
	h.owner, h.state = nil, nil
	lentHoldPool.Put(h)
	keystore.Release(core, st, n, at, drop)
}

// asLentHold is the lentHold whose hold h is.
func asLentHold(h *hold) *lentHold { return (*lentHold)(unsafe.Pointer(h)) }
