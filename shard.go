package keylimit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// keyed is what every limiter type is built on: the keys, the clock, the key
// cap and the evictor. A limiter type supplies its per-key state S and the
// functions on it that keyed needs (stateHooks).
//
// # The map
//
// States live in one xsync.MapOf. That table is already sharded the way a
// limiter needs: it is split into 64-byte buckets, Load takes no lock and
// writes nothing, and an insert locks one bucket. A second level of shards on
// top would cost a hash and an indirection on every call and buy nothing.
//
// The map is keyed by a 64-bit hash of the key (maphash, with a seed drawn
// when the limiter is made), not by the key itself: the limiter keeps no copy
// of its keys, which saves their bytes (16 for a 16-byte string, plus its
// 16-byte header in the map entry) and makes a lookup one integer compare.
// Two keys that collide share one state. That can only make the limiter
// stricter for those two keys, never admit more than one key's quota; with a
// random seed no one can aim for a collision, and by chance one collision
// among a million live keys has a probability below 3 in 100 million.
//
// # Retirement
//
// A state leaves the map only after it has been retired, that is after its
// limiter swapped a sentinel into it by CAS (Reset, the evictor). A caller
// that meets a retired state calls replace, which installs a fresh one under
// the bucket lock, so no admission is ever recorded in a state that is no
// longer reachable.
//
// Limiters embed a *keyed. The evictor goroutine holds the keyed, never the
// limiter, so that a limiter dropped without Close can be collected and its
// cleanup can stop the goroutine (see evict.go).
type keyed[K comparable, S any] struct {
	m     *xsync.MapOf[uint64, *S]
	seed  maphash.Seed
	clock timeSource
	hooks stateHooks[K, S]

	// count is the number of keys in m: incremented before an insert (a
	// reservation, undone if the key turned out to exist), decremented after
	// a removal. It is what Len reports and what the key cap checks.
	count    atomic.Int64
	maxKeys  int64 // 0: no cap
	overflow overflowPolicy

	// sweepMu serializes sweeps (the evictor's and those made at the key
	// cap). nextIdle, written under sweepMu by the last sweep and lowered by
	// every insert since, is a time before which no tracked key can be
	// evicted: at the cap, a new key before then is refused without a sweep.
	sweepMu  sync.Mutex
	nextIdle atomic.Int64
}

// stateHooks are what keyed needs to know of a limiter's per-key state.
type stateHooks[K comparable, S any] struct {
	// newState returns the state of a key never seen (or forgotten).
	newState func(key K) *S
	// retireIfIdle retires p if, at now, it is indistinguishable from
	// newState's (a full bucket, an empty window), and reports whether it
	// did. It must decide and retire in one CAS, so that an admission racing
	// with it either lands first (and p is not retired) or meets the retired
	// state and starts over on a fresh one. When it does not retire p, it
	// returns the earliest time at which p could be idle, if nothing is
	// admitted meanwhile.
	retireIfIdle func(p *S, now int64) (retired bool, idleAt int64)
	// retire retires p whatever its state (Reset).
	retire func(p *S)
}

func newKeyed[K comparable, S any](o options, hooks stateHooks[K, S]) *keyed[K, S] {
	k := &keyed[K, S]{
		m:        xsync.NewMapOfWithHasher[uint64, *S](hashHash),
		seed:     maphash.MakeSeed(),
		clock:    newTimeSource(o.clock),
		hooks:    hooks,
		maxKeys:  int64(o.maxKeys),
		overflow: o.overflow,
	}
	k.nextIdle.Store(minTime)
	return k
}

// hashHash is the map's hasher: its keys are already seeded hashes, so it
// only mixes in the table's own seed.
func hashHash(h, seed uint64) uint64 { return h ^ seed }

func (k *keyed[K, S]) hash(key K) uint64 { return maphash.Comparable(k.seed, key) }

// load returns the state of key, or nil. Lock-free.
func (k *keyed[K, S]) load(key K) *S {
	p, _ := k.m.Load(k.hash(key))
	return p
}

// loadOrCreate returns the state of key, creating it if it is missing, or
// nil if the key is new and the key cap is reached with no key that can be
// evicted (see untracked). Lock-free and allocation-free when the key exists.
func (k *keyed[K, S]) loadOrCreate(key K) *S {
	h := k.hash(key)
	if p, ok := k.m.Load(h); ok {
		return p
	}
	return k.create(key, h)
}

// create inserts a fresh state for key, within the key cap.
func (k *keyed[K, S]) create(key K, h uint64) *S {
	if !k.reserve() {
		return nil
	}
	created := false
	p, _ := k.m.LoadOrCompute(h, func() *S {
		created = true
		return k.hooks.newState(key)
	})
	if !created {
		k.count.Add(-1) // another caller inserted it first
		return p
	}
	// A new key may go idle before the time the last sweep computed.
	k.nextIdle.Store(minTime)
	return p
}

// reserve takes a place for a new key, making room by a sweep if the cap is
// reached and some key can go. It reports false if no place could be had.
func (k *keyed[K, S]) reserve() bool {
	if k.tryReserve() {
		return true
	}
	return k.sweepAtCap() && k.tryReserve()
}

// tryReserve takes a place for a new key if the cap allows.
func (k *keyed[K, S]) tryReserve() bool {
	if k.maxKeys == 0 {
		k.count.Add(1)
		return true
	}
	for {
		c := k.count.Load()
		if c >= k.maxKeys {
			return false
		}
		if k.count.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// sweepAtCap evicts the idle keys to make room for a new one, unless no key
// can be idle yet or another sweep is running. It reports whether it swept.
func (k *keyed[K, S]) sweepAtCap() bool {
	if k.clock.now() < k.nextIdle.Load() || !k.sweepMu.TryLock() {
		return false
	}
	defer k.sweepMu.Unlock()
	k.sweep()
	return true
}

// replace swaps the retired state old of key for a fresh one and returns the
// state now mapped, which is another caller's if one replaced old first. It
// returns nil if old was removed meanwhile and the key cap has no place left.
func (k *keyed[K, S]) replace(key K, old *S) *S {
	p, _ := k.m.Compute(k.hash(key), func(cur *S, loaded bool) (*S, bool) {
		if loaded && cur != old {
			return cur, false
		}
		if !loaded {
			// The evictor removed old between our load and now: this is
			// an insert, and needs a place under the cap. (No sweep
			// here: it would lock the bucket this callback holds.)
			if !k.tryReserve() {
				return nil, true
			}
			k.nextIdle.Store(minTime)
		}
		return k.hooks.newState(key), false
	})
	return p
}

// remove deletes the entry of hash h if it still maps to the retired state
// old.
func (k *keyed[K, S]) remove(h uint64, old *S) {
	k.m.Compute(h, func(cur *S, loaded bool) (*S, bool) {
		if loaded && cur == old {
			k.count.Add(-1)
			return cur, true
		}
		return cur, !loaded
	})
}

// reset forgets key: its state is retired, then removed.
func (k *keyed[K, S]) reset(key K) {
	h := k.hash(key)
	if p, ok := k.m.Load(h); ok {
		k.hooks.retire(p)
		k.remove(h, p)
	}
}

// len is the number of keys tracked.
func (k *keyed[K, S]) len() int { return int(k.count.Load()) }
