package keylimit

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// Per-key limits and limits changed at runtime.
//
// A limiter's keys are each under a limit: the limiter's own, or, with
// WithKeyLimit, one a function gives for the key. The limit is resolved when
// the key is first seen and kept with its state (a pointer to a config
// shared by the keys under the same limit), so the hot path never calls the
// function. SetLimit starts a new generation and marks the configs of the
// last one superseded: every key notices on its next call, resolves its
// limit again and carries its state over to it, each limiter type in its
// own documented way.
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

// WithKeyLimit gives each key its own limit: f(key), asked when the key is
// first seen (and again after SetLimit). A zero Limit{} from f means the
// limiter's own limit. One limiter can so serve several tiers: a paying
// client twice the quota of a free one.
//
// f must be a func(K) Limit for the limiter's key type K, or the constructor
// returns an error: an option cannot carry the limiter's key type, so Go
// cannot check it at compile time. Each limiter's SetKeyLimit method can,
// and does the same from its call on. f is called from many goroutines at
// once and must not call the limiter. If f returns an invalid Limit, the
// requests of that key are refused and their Result.Err says why.
func WithKeyLimit[K comparable](f func(key K) Limit) Option {
	return optionFunc(func(o *options) {
		if f == nil {
			o.fail(fmt.Errorf("keylimit: WithKeyLimit(nil)"))
			return
		}
		o.keyLimit = f
	})
}

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

// policy resolves the config each key is under.
type policy[K comparable, C any] struct {
	build func(Limit) (C, error)          // validates a Limit and builds its arithmetic
	cur   atomic.Pointer[policyGen[K, C]] // the current generation
	mu    sync.Mutex                      // serializes SetLimit and SetKeyLimit
}

// policyGen is one generation of a policy: the limiter's limit, the
// function that gives keys their own, and the configs of the limits keys
// have been given, one per distinct Limit, so that a million keys in three
// tiers share three configs.
type policyGen[K comparable, C any] struct {
	def      *keyConfig[C]
	keyLimit func(K) Limit                      // nil: every key is under def
	byLimit  *xsync.MapOf[Limit, *keyConfig[C]] // nil without keyLimit
}

// init sets up p, the zero policy embedded in a limiter, for the limit l
// and the options o.
func (p *policy[K, C]) init(l Limit, o options, build func(Limit) (C, error)) error {
	p.build = build
	var f func(K) Limit
	if o.keyLimit != nil {
		var ok bool
		if f, ok = o.keyLimit.(func(K) Limit); !ok {
			return fmt.Errorf("keylimit: WithKeyLimit got a %T, but the limiter's keys are %v",
				o.keyLimit, reflect.TypeFor[K]())
		}
	}
	return p.start(&l, f, false)
}

// set makes l the limiter's limit in a new generation.
func (p *policy[K, C]) set(l Limit) error { return p.start(&l, nil, false) }

// setKeyLimit makes f the limiter's per-key limit function (nil: none) in a
// new generation.
func (p *policy[K, C]) setKeyLimit(f func(K) Limit) error { return p.start(nil, f, true) }

// start begins a generation under the limit l (nil: the current one) and,
// if setF, the function f (else the current one).
func (p *policy[K, C]) start(l *Limit, f func(K) Limit, setF bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	if l == nil {
		l = &old.def.limit
	}
	if !setF && old != nil {
		f = old.keyLimit
	}
	arith, err := p.build(*l)
	if err != nil {
		return err
	}
	g := &policyGen[K, C]{def: &keyConfig[C]{arith: arith, limit: *l}, keyLimit: f}
	if f != nil {
		g.byLimit = xsync.NewMapOf[Limit, *keyConfig[C]]()
	}
	p.cur.Store(g)
	if old != nil {
		// After the Store: a config that resolve adds to old after this
		// Range has passed it is marked by resolve itself.
		old.def.superseded.Store(true)
		if old.byLimit != nil {
			old.byLimit.Range(func(_ Limit, c *keyConfig[C]) bool {
				c.superseded.Store(true)
				return true
			})
		}
	}
	return nil
}

// limit is the limiter's own limit.
func (p *policy[K, C]) limit() Limit { return p.cur.Load().def.limit }

// resolve returns the config key is under in the current generation.
func (p *policy[K, C]) resolve(key K) *keyConfig[C] {
	for {
		g := p.cur.Load()
		if g.keyLimit == nil {
			return g.def
		}
		c := p.lookup(g, g.keyLimit(key))
		if c == g.def || p.cur.Load() == g {
			return c
		}
		// A SetLimit began a generation meanwhile, and may have marked
		// g's configs before c was added: mark it, and ask again.
		c.superseded.Store(true)
	}
}

// lookup returns the config of l in generation g, making it if it is new.
func (p *policy[K, C]) lookup(g *policyGen[K, C], l Limit) *keyConfig[C] {
	if l == (Limit{}) || l == g.def.limit {
		return g.def
	}
	if c, ok := g.byLimit.Load(l); ok {
		return c
	}
	c, _ := g.byLimit.LoadOrCompute(l, func() *keyConfig[C] {
		arith, err := p.build(l)
		if err != nil {
			err = fmt.Errorf("keylimit: the limit WithKeyLimit gave this key is invalid: %w", err)
		}
		return &keyConfig[C]{arith: arith, limit: l, err: err}
	})
	return c
}

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
// taken: WithKeyLimit's function never runs under it.
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
