package keylimit

import (
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// shard is the keyed store every limiter type stands on: one xsync.MapOf of
// per-key states, the clock, the key cap and what the evictor needs. A
// limiter type supplies its per-key state S and the functions on it that the
// shard needs (stateHooks).
//
// It is one map, not a set of shards: xsync.MapOf is already split into
// 64-byte buckets, Load takes no lock and writes nothing, and an insert locks
// one bucket, so a second level of sharding would cost a hash and an
// indirection on every call and buy nothing.
//
// The map is keyed by a 64-bit hash of the key (maphash, seeded when the
// limiter is made), not by the key itself: the limiter keeps no copy of its
// keys, and a lookup is one integer compare. Two keys whose hashes collide
// share one state: both are judged by the limit of whichever was seen
// first (with SetKeyLimit that may be the other key's), and their events
// count together. With a random seed no one can aim for a collision; by
// chance, among a million live keys, some pair collides with probability
// about 3 in 100 million (n²/2^65).
//
// A state leaves the map only after its limiter has retired it by swapping
// in a sentinel (Reset, the evictor). A caller that meets a retired state
// calls replace, which installs a fresh one under the map's lock for the
// key, so no admission is recorded in a state no longer reachable.
//
// The evictor goroutine holds the shard, never the limiter, so that a
// limiter dropped without Close can be collected and its cleanup can stop
// the goroutine (see evict.go).
type shard[K comparable, S any] struct {
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

	counts shardStats
	// logger is WithLogger's, or nil for slog.Default(); capLog says
	// whether the key cap leaves new keys untracked, and what of it was
	// logged (evict.go).
	logger *slog.Logger
	capLog capLog
	// resets counts Reset calls, so that a Refund can tell whether one came
	// between an admission and its refund (see Admission).
	resets atomic.Uint64
	// onces are the onces of the Admissions Admit hands out.
	onces onces
}

// stateHooks are what a shard needs to know of a limiter's per-key state.
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

func newShard[K comparable, S any](o options, hooks stateHooks[K, S]) *shard[K, S] {
	s := &shard[K, S]{
		m:        xsync.NewMapOfWithHasher[uint64, *S](hashHash),
		seed:     maphash.MakeSeed(),
		hooks:    hooks,
		maxKeys:  int64(o.maxKeys),
		overflow: o.overflow,
		logger:   o.logger,
	}
	s.clock.init(o.clock)
	s.onces.init()
	s.nextIdle.Store(minTime)
	if o.stats {
		s.counts.decisions = newStripedCounts()
	}
	return s
}

// hashHash is the map's hasher: its keys are already seeded hashes, so it
// only mixes in the table's own seed.
func hashHash(h, seed uint64) uint64 { return h ^ seed }

func (s *shard[K, S]) hash(key K) uint64 { return maphash.Comparable(s.seed, key) }

// ofKey reports whether a is an Admission made for key (see Admission.key):
// a Refund gives back nothing of another key's.
func (s *shard[K, S]) ofKey(key K, a *Admission) bool { return a.key == s.hash(key) }

// load returns the state of key, or nil. Lock-free.
func (s *shard[K, S]) load(key K) *S { return s.lookup(s.hash(key)) }

// lookup returns the state of the key whose hash is h, or nil. Lock-free.
func (s *shard[K, S]) lookup(h uint64) *S {
	p, _ := s.m.Load(h)
	return p
}

// loadOrCreate returns the state of key, creating it if it is missing, or
// nil if the key is new and the key cap is reached with no key that can be
// evicted (see untracked). Lock-free and allocation-free when the key exists.
func (s *shard[K, S]) loadOrCreate(key K) *S {
	h := s.hash(key)
	if p, ok := s.m.Load(h); ok {
		return p
	}
	return s.create(key, h)
}

// create inserts a fresh state for key, within the key cap.
func (s *shard[K, S]) create(key K, h uint64) *S {
	if !s.reserve() {
		s.capReached()
		return nil
	}
	s.capRelieved()
	created := false
	p, _ := s.m.LoadOrCompute(h, func() *S {
		created = true
		return s.hooks.newState(key)
	})
	if !created {
		s.count.Add(-1) // another caller inserted it first
		return p
	}
	// A new key may go idle before the time the last sweep computed.
	s.nextIdle.Store(minTime)
	return p
}

// reserve takes a place for a new key, making room by a sweep if the cap is
// reached and some key can go. It reports false if no place could be had.
func (s *shard[K, S]) reserve() bool {
	if s.tryReserve() {
		return true
	}
	return s.sweepAtCap() && s.tryReserve()
}

// tryReserve takes a place for a new key if the cap allows.
func (s *shard[K, S]) tryReserve() bool {
	if s.maxKeys == 0 {
		s.count.Add(1)
		return true
	}
	for {
		c := s.count.Load()
		if c >= s.maxKeys {
			return false
		}
		if s.count.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// sweepAtCap evicts the idle keys to make room for a new one, unless no key
// can be idle yet or another sweep is running. It reports whether it swept.
func (s *shard[K, S]) sweepAtCap() bool {
	if s.clock.now() < s.nextIdle.Load() || !s.sweepMu.TryLock() {
		return false
	}
	defer s.sweepMu.Unlock()
	s.sweep()
	return true
}

// replace swaps the retired state old of key for a fresh one and returns the
// state now mapped, which is another caller's if one replaced old first. It
// returns nil if old was removed meanwhile and the key cap has no place left.
func (s *shard[K, S]) replace(key K, old *S) *S { return s.replaceAt(key, s.hash(key), old) }

// replaceAt is replace for the key whose hash is h.
func (s *shard[K, S]) replaceAt(key K, h uint64, old *S) *S {
	p, _ := s.m.Compute(h, func(cur *S, loaded bool) (*S, bool) {
		if loaded && cur != old {
			return cur, false
		}
		if !loaded {
			// The evictor removed old between our load and now: this is
			// an insert, and needs a place under the cap. (No sweep
			// here: it would lock the bucket this callback holds.)
			if !s.tryReserve() {
				s.capReached()
				return nil, true
			}
			s.nextIdle.Store(minTime)
		}
		return s.hooks.newState(key), false
	})
	return p
}

// remove deletes the entry of hash h if it still maps to the retired state
// old.
func (s *shard[K, S]) remove(h uint64, old *S) {
	s.m.Compute(h, func(cur *S, loaded bool) (*S, bool) {
		if loaded && cur == old {
			s.count.Add(-1)
			return cur, true
		}
		return cur, !loaded
	})
}

// reset forgets key: its state is retired, then removed.
func (s *shard[K, S]) reset(key K) {
	s.resets.Add(1)
	h := s.hash(key)
	if p, ok := s.m.Load(h); ok {
		s.hooks.retire(p)
		s.remove(h, p)
	}
}

// len is the number of keys tracked.
func (s *shard[K, S]) len() int { return int(s.count.Load()) }
