package keylimit

import (
	"github.com/puzpuzpuz/xsync/v3"
)

// keyed is what every limiter type is built on: the keys, the clock, and the
// background evictor. A limiter type supplies its per-key state S and two
// functions on it (stateHooks).
//
// The keys live in one xsync.MapOf. That table is already sharded the way a
// limiter needs: it is split into 64-byte buckets, Load takes no lock and
// writes nothing, and an insert locks one bucket. A second level of shards on
// top would cost a hash and an indirection on every call and buy nothing.
//
// Retirement: a state leaves the map only after it has been retired, that is
// after its limiter swapped a sentinel into it by CAS (Reset, the evictor).
// A caller that meets a retired state calls replace, which installs a fresh
// one under the bucket lock, so no admission is ever recorded in a state that
// is no longer reachable.
type keyed[K comparable, S any] struct {
	m     *xsync.MapOf[K, *S]
	hooks stateHooks[K, S]
	clock timeSource
}

// stateHooks are what keyed needs to know of a limiter's per-key state.
type stateHooks[K comparable, S any] struct {
	// newState returns the state of a key never seen (or forgotten).
	newState func(key K) *S
	// retireIfIdle retires p if, at now, it is indistinguishable from
	// newState's (a full bucket, an empty window), and reports whether it
	// did. It must decide and retire in one CAS, so that an admission racing
	// with it either lands first (and p is not retired) or meets the retired
	// state and starts over on a fresh one.
	retireIfIdle func(p *S, now int64) bool
	// retire retires p whatever its state (Reset).
	retire func(p *S)
}

func newKeyed[K comparable, S any](o options, hooks stateHooks[K, S]) keyed[K, S] {
	return keyed[K, S]{
		m:     xsync.NewMapOf[K, *S](),
		hooks: hooks,
		clock: newTimeSource(o.clock),
	}
}

// load returns the state of key, or nil. Lock-free.
func (k *keyed[K, S]) load(key K) *S {
	p, _ := k.m.Load(key)
	return p
}

// loadOrCreate returns the state of key, creating it if it is missing.
// Lock-free and allocation-free when the key exists.
func (k *keyed[K, S]) loadOrCreate(key K) *S {
	if p, ok := k.m.Load(key); ok {
		return p
	}
	p, _ := k.m.LoadOrCompute(key, func() *S { return k.hooks.newState(key) })
	return p
}

// replace swaps the retired state old of key for a fresh one and returns the
// state now mapped, which is another caller's if one replaced old first.
func (k *keyed[K, S]) replace(key K, old *S) *S {
	p, _ := k.m.Compute(key, func(cur *S, loaded bool) (*S, bool) {
		if loaded && cur != old {
			return cur, false
		}
		return k.hooks.newState(key), false
	})
	return p
}

// remove deletes key if it still maps to the retired state old.
func (k *keyed[K, S]) remove(key K, old *S) {
	k.m.Compute(key, func(cur *S, loaded bool) (*S, bool) {
		return cur, !loaded || cur == old
	})
}

// reset forgets key: its state is retired, then removed.
func (k *keyed[K, S]) reset(key K) {
	if p := k.load(key); p != nil {
		k.hooks.retire(p)
		k.remove(key, p)
	}
}

// len is the number of keys tracked.
func (k *keyed[K, S]) len() int { return k.m.Size() }

// close stops the background work.
func (k *keyed[K, S]) close() error { return nil }
