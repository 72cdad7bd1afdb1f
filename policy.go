package keylimit

import (
	"runtime"
	"sync/atomic"

	"github.com/keylimit/keylimit/internal/perkey"
)

// Per-key limits and limits changed at runtime.
//
// A limiter's keys are each under a limit: the limiter's own, or, with
// SetKeyLimit, one a function gives for the key. The limit is resolved when
// the key is first seen and kept with its state (a pointer to a config
// shared by the keys under the same limit), so the hot path never calls the
// function. SetLimit and SetKeyLimit start a new generation and mark the
// configs of the last one superseded (internal/perkey keeps the
// generations, for the Redis limiters too): every key notices on its next
// call, resolves its limit again and carries its state over to it, each
// limiter type in its own documented way.
//
// A TokenBucket converts a key's state in place: its TAT means the same
// under any limit. The window types cannot: their packed words and rings
// are laid out for one limit (count bits from the Period, a ring of Events
// slots), so the same bits mean different things under two limits, and a
// caller that read the word under the old limit could CAS its old-layout
// update into a converted word that happens to hold the same bits. So a
// window state's config never changes: a change of limit moves the key to
// a new state (moveKey), and retires the old one with a "moved" sentinel
// after which it is never written again, so no CAS on it can succeed.

// keyConfig is the per-limit arithmetic of one limiter type (gcra for a
// bucket), as shared by every key under one limit in one generation.
type keyConfig[C any] struct {
	// superseded is set once a later generation has begun: a key under c
	// resolves its limit again on its next call. Every decision reads c
	// anyway, so checking it costs one load and no other cache line.
	superseded atomic.Bool
	arith      C
	limit      Limit
	err        error // an invalid key limit: the key's requests are refused
}

// stale reports whether c is from a generation before the current one.
func (c *keyConfig[C]) stale() bool { return c.superseded.Load() }

// Refuse and Supersede make a keyConfig a perkey.Config.
func (c *keyConfig[C]) Refuse(err error) { c.err = err }
func (c *keyConfig[C]) Supersede()       { c.superseded.Store(true) }

// policy resolves the config each key is under: perkey's generations, over
// one limiter type's arithmetic.
type policy[K comparable, C any] struct {
	limits perkey.Limits[K, Limit, *keyConfig[C]]
	// burstless is set by the window types, which ignore Limit.Burst: the
	// limits they report (Limit, LimitOf) have none, so that a Limit's
	// FillTime is the time its quota takes to come back whole.
	burstless bool
}

// init sets up p, the zero policy a limiter holds, for the limit l; build
// validates a Limit and builds its arithmetic. Keys get limits of their own
// from SetKeyLimit.
func (p *policy[K, C]) init(l Limit, build func(Limit) (C, error)) error {
	return p.limits.Init(l, nil, func(l Limit) (*keyConfig[C], error) {
		arith, err := build(l)
		return &keyConfig[C]{arith: arith, limit: l}, err
	})
}

// set makes l the limiter's limit in a new generation.
func (p *policy[K, C]) set(l Limit) error { return p.limits.Set(l) }

// setKeyLimit makes f the limiter's per-key limit function (nil: none) in a
// new generation.
func (p *policy[K, C]) setKeyLimit(f func(K) Limit) error { return p.limits.SetKeyLimit(f) }

// limit is the limiter's own limit, as it reports it.
func (p *policy[K, C]) limit() Limit { return p.report(p.limits.Limit()) }

// report is l as the limiter reports it.
func (p *policy[K, C]) report(l Limit) Limit {
	if p.burstless {
		l.Burst, l.burstSet = 0, false // as if never given
	}
	return l
}

// own is the config of the limiter's own limit.
func (p *policy[K, C]) own() *keyConfig[C] { return p.limits.Default() }

// resolve returns the config key is under in the current generation.
func (p *policy[K, C]) resolve(key K) *keyConfig[C] { return p.limits.Resolve(key) }

// stale reports whether c is from a generation before the current one.
func (p *policy[K, C]) stale(c *keyConfig[C]) bool { return c.stale() }

// moveKey moves key, whose state old is under a stale config, to a new
// state under the key's current config, and returns the state the key maps
// to afterwards (nil if it maps to none: evicted meanwhile).
//
// carry builds the new state from old and retires old with its moved
// sentinel, both at once (old's CAS or lock), at time now; it reports false,
// changing nothing, if old was retired first (Reset, the evictor). It runs
// under the map's lock for the key, so a caller that meets the moved
// sentinel and looks the key up again (shard.replace, which takes that
// lock) finds the new state. The key's limit is resolved before the lock is
// taken: SetKeyLimit's function never runs under it.
func moveKey[K comparable, C, S any](k *shard[K, S], p *policy[K, C], key K, old *S,
	carry func(old *S, c *keyConfig[C], now int64) (*S, bool),
) *S {
	c := p.resolve(key)
	st, _ := k.m.Compute(k.hash(key), func(cur *S, loaded bool) (*S, bool) {
		if !loaded {
			return cur, true // gone: nothing to move
		}
		if cur == old {
			if nu, ok := carry(old, c, k.clock.now()); ok {
				return nu, false
			}
		}
		return cur, false
	})
	return st
}

// resetKey is shard.reset for the window types, whose states a change of
// limit moves: retire retires a state and reports true, unless the state
// had been moved, in which case the key's events live on in the state it
// was moved to, which resetKey retires instead.
func resetKey[K comparable, S any](k *shard[K, S], key K, retire func(*S) (retired bool)) {
	k.resets.Add(1)
	h := k.hash(key)
	for {
		p, ok := k.m.Load(h)
		if !ok {
			return
		}
		if retire(p) {
			k.remove(h, p)
			return
		}
		// Moved: the map shows the new state once the move's lock is
		// released, a moment from now.
		runtime.Gosched()
	}
}

// limitOf is the limit key is under now.
func (p *policy[K, C]) limitOf(key K) Limit { return p.report(p.resolve(key).limit) }
