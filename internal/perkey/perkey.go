// Package perkey resolves the limit each key of a limiter is under: the
// limiter's own, or the one a per-key function gives the key
// (SetKeyLimit). Limits are held in
// generations: SetLimit and SetKeyLimit begin a new one, and a key resolved
// again after that meets the new limits.
// keylimit's in-memory limiters and redislimit's Redis limiters both stand
// on it; each brings its own config, the arithmetic it decides with under
// one limit.
package perkey

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// Config is what Limits needs of a limiter's config: one limit's
// arithmetic, shared by every key under that limit in one generation.
type Config interface {
	comparable
	// Refuse records err, why the limit the per-key function gave is
	// invalid: the config's keys are refused, and their Results say why.
	// Limits calls it once, before the config is published.
	Refuse(err error)
	// Supersede marks the config as from a generation that has ended, for
	// a limiter whose keys hold their config and must resolve again.
	Supersede()
}

// Limits is which limit each key of a limiter is under. L is the limit
// type (keylimit.Limit, which this package cannot import), C the
// limiter's config. The zero Limits is ready for Init; it is safe for
// concurrent use after.
type Limits[K comparable, L comparable, C Config] struct {
	build func(L) (C, error)           // validates a limit and makes its config
	cur   atomic.Pointer[gen[K, L, C]] // the current generation
	mu    sync.Mutex                   // serializes Set and SetKeyLimit
}

// gen is one generation: the limiter's limit and its config, the function
// that gives keys their own, and the configs of the limits keys have been
// given, one per distinct limit, so that a million keys in three tiers
// share three configs.
type gen[K comparable, L comparable, C Config] struct {
	limit    L
	def      C
	keyLimit func(K) L          // nil: every key is under def
	byLimit  *xsync.MapOf[L, C] // nil without keyLimit
}

// Init sets up p with l as the limiter's limit, f as its per-key function
// (nil: none), and build, which makes the config of a limit and returns
// why the limit is invalid, if it is. For an invalid limit build still
// returns a config: a key the function gives that limit is under it,
// refused (see Config.Refuse). Init returns build's error for l.
func (p *Limits[K, L, C]) Init(l L, f func(K) L, build func(L) (C, error)) error {
	p.build = build
	return p.start(&l, f, false)
}

// Set makes l the limiter's limit in a new generation. It returns build's
// error for l, and changes nothing, if l is invalid.
func (p *Limits[K, L, C]) Set(l L) error { return p.start(&l, nil, false) }

// SetKeyLimit makes f the limiter's per-key function (nil: none) in a new
// generation.
func (p *Limits[K, L, C]) SetKeyLimit(f func(K) L) error { return p.start(nil, f, true) }

// start begins a generation under the limit l (nil: the current one) and,
// if setF, the function f (else the current one).
func (p *Limits[K, L, C]) start(l *L, f func(K) L, setF bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	if l == nil {
		l = &old.limit
	}
	if !setF && old != nil {
		f = old.keyLimit
	}
	def, err := p.build(*l)
	if err != nil {
		return err
	}
	g := &gen[K, L, C]{limit: *l, def: def, keyLimit: f}
	if f != nil {
		g.byLimit = xsync.NewMapOf[L, C]()
	}
	p.cur.Store(g)
	if old != nil {
		// After the Store: a config that Resolve adds to old after this
		// Range has passed it is marked by Resolve itself.
		old.def.Supersede()
		if old.byLimit != nil {
			old.byLimit.Range(func(_ L, c C) bool {
				c.Supersede()
				return true
			})
		}
	}
	return nil
}

// Limit returns the limiter's own limit.
func (p *Limits[K, L, C]) Limit() L { return p.cur.Load().limit }

// Default returns the config of the limiter's own limit.
func (p *Limits[K, L, C]) Default() C { return p.cur.Load().def }

// Resolve returns the config key is under in the current generation. The
// per-key function runs here, so a caller that keeps a key's config (the
// in-memory limiters) calls Resolve only when the key is new or its config
// is superseded.
func (p *Limits[K, L, C]) Resolve(key K) C {
	for {
		g := p.cur.Load()
		if g.keyLimit == nil {
			return g.def
		}
		c := p.lookup(g, g.keyLimit(key))
		if c == g.def || p.cur.Load() == g {
			return c
		}
		// A Set began a generation meanwhile, and may have marked g's
		// configs before c was added: mark it, and ask again.
		c.Supersede()
	}
}

// lookup returns the config of l in generation g, making it if it is new.
// The zero limit means the limiter's own.
func (p *Limits[K, L, C]) lookup(g *gen[K, L, C], l L) C {
	var zero L
	if l == zero || l == g.limit {
		return g.def
	}
	if c, ok := g.byLimit.Load(l); ok {
		return c
	}
	c, _ := g.byLimit.LoadOrCompute(l, func() C {
		c, err := p.build(l)
		if err != nil {
			c.Refuse(fmt.Errorf("keylimit: the per-key limit function gave this key an invalid limit: %w", err))
		}
		return c
	})
	return c
}
