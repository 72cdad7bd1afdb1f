package keylimit

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v3"
)

// Per-key limits and limits changed at runtime.
//
// A limiter's keys are each under a limit: the limiter's own, or, with
// WithKeyLimit, one a function gives for the key. The limit is resolved when
// the key is first seen and kept with its state (a pointer to a shared,
// immutable config), so the hot path never calls the function. SetLimit
// starts a new generation: every key notices on its next call that its config
// is from an older generation, resolves its limit again and carries its state
// over to it, each limiter type in its own documented way.

// WithKeyLimit gives each key its own limit: f(key), asked when the key is
// first seen (and again after SetLimit). A zero Limit{} from f means the
// limiter's own limit. One limiter can so serve several tiers: a paying
// client twice the quota of a free one.
//
// f must be a func(K) Limit for the limiter's key type K, or the constructor
// returns an error. f is called from many goroutines at once and must not
// call the limiter. If f returns an invalid Limit, the requests of that key
// are refused and their Result.Err says why; nothing panics.
func WithKeyLimit[K comparable](f func(key K) Limit) Option {
	return optionFunc(func(o *options) {
		if f == nil {
			o.fail(fmt.Errorf("keylimit: WithKeyLimit(nil)"))
			return
		}
		o.keyLimit = f
	})
}

// config is the per-limit arithmetic of one limiter type (gcra for a bucket),
// as shared by every key under one limit.
type keyConfig[C any] struct {
	arith C
	limit Limit
	gen   uint64 // the generation it was resolved in
	err   error  // an invalid key limit: the key's requests are refused
}

// policy resolves the config each key is under.
type policy[K comparable, C any] struct {
	keyLimit func(K) Limit                // nil: every key is under the limiter's limit
	build    func(Limit) (C, error)       // validates a Limit and builds its arithmetic
	cur      atomic.Pointer[policyGen[C]] // the current generation
	mu       sync.Mutex                   // serializes SetLimit
}

// policyGen is one generation of a policy: the limiter's limit, and the
// configs of the limits keys have been given, one per distinct Limit, so that
// a million keys in three tiers share three configs.
type policyGen[C any] struct {
	gen     uint64
	def     *keyConfig[C]
	byLimit *xsync.MapOf[Limit, *keyConfig[C]] // nil without WithKeyLimit
}

// init sets up p, the zero policy embedded in a limiter, for the limit l
// and the options o.
func (p *policy[K, C]) init(l Limit, o options, build func(Limit) (C, error)) error {
	p.build = build
	if o.keyLimit != nil {
		f, ok := o.keyLimit.(func(K) Limit)
		if !ok {
			return fmt.Errorf("keylimit: WithKeyLimit got a %T, but the limiter's keys are %v",
				o.keyLimit, reflect.TypeFor[K]())
		}
		p.keyLimit = f
	}
	return p.set(l)
}

// set makes l the limiter's limit in a new generation.
func (p *policy[K, C]) set(l Limit) error {
	arith, err := p.build(l)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := uint64(1)
	if old := p.cur.Load(); old != nil {
		gen = old.gen + 1
	}
	g := &policyGen[C]{gen: gen, def: &keyConfig[C]{arith: arith, limit: l, gen: gen}}
	if p.keyLimit != nil {
		g.byLimit = xsync.NewMapOf[Limit, *keyConfig[C]]()
	}
	p.cur.Store(g)
	return nil
}

// limit is the limiter's own limit.
func (p *policy[K, C]) limit() Limit { return p.cur.Load().def.limit }

// resolve returns the config key is under in the current generation.
func (p *policy[K, C]) resolve(key K) *keyConfig[C] {
	g := p.cur.Load()
	if p.keyLimit == nil {
		return g.def
	}
	l := p.keyLimit(key)
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
		return &keyConfig[C]{arith: arith, limit: l, gen: g.def.gen, err: err}
	})
	return c
}

// stale reports whether c is from a generation before the current one.
func (p *policy[K, C]) stale(c *keyConfig[C]) bool { return c.gen != p.cur.Load().gen }
