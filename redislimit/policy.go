package redislimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/puzpuzpuz/xsync/v3"
)

// Per-key limits and limits changed at runtime, as in keylimit's policy.go:
// a key is under the limiter's limit or, with WithKeyLimit, the one a
// function gives for it; SetLimit changes the limiter's limit.
//
// Redis keeps the state, so this instance keeps no key: each decision
// resolves the key's limit in process and sends it with the script call.
// The state records what it needs to be read under any limit (a bucket the
// interval its TAT counts in, a fixed window its period), so that a key
// keeps what it used whichever limit decides next, on any instance.

// WithKeyLimit gives each key its own limit: f(key), asked on each decision
// (Redis keeps the keys' state, and this instance no key), so f must be
// quick and safe for concurrent use. A zero Limit{} from f means the
// limiter's own limit. It is keylimit.WithKeyLimit for the Redis limiters:
// the same function serves both.
//
// A key keeps what it used when f starts giving it another limit, as across
// SetLimit. If f returns an invalid Limit, the key's requests are refused
// without a round trip and their Result.Err says why; nothing panics.
func WithKeyLimit(f func(key string) keylimit.Limit) Option {
	return optionFunc(func(o *options) {
		if f == nil {
			o.fail(errors.New("redislimit: WithKeyLimit(nil)"))
			return
		}
		o.keyLimit = f
	})
}

// decisionOptions are the options of the decision path: the per-key limit
// function, and the clock the tests make the scripts use.
type decisionOptions struct {
	keyLimit    func(string) keylimit.Limit // WithKeyLimit's; nil: none
	scriptClock *scriptClock                // nil: Redis server time
}

// algorithm is what distinguishes a token bucket from the windows: the
// script's name for it and how a limit becomes its parameters.
type algorithm struct {
	name string        // the script's name of the algorithm; in the default prefix too
	arg  any           // name, boxed once so that passing it to the client does not allocate
	unit time.Duration // of the times the script returns: ns or µs
	// leases: the script can lease for it (WithLeases); refills: its
	// events come back one interval at a time (a bucket), not all at a
	// window's end.
	leases, refills bool
	// params checks l and returns the script's two parameters for it (boxed
	// int64s), the quota (Result.Limit: the most events admitted at once),
	// or an error that says why the algorithm cannot take l.
	params func(l keylimit.Limit) (p1, p2 int64, quota int, err error)
}

// keyLimit is one limit of one limiter as a decision needs it: the
// script's parameters, boxed once so that a call does not allocate to pass
// them, and what the Results and the failure policy say. Every key under
// the same limit shares one.
type keyLimit struct {
	owner          *limiter
	alg            *algorithm
	limit          keylimit.Limit
	param1, param2 any
	quota          int
	// retryClosed is the RetryAfter of a refusal under FailClosed: the
	// limit's interval.
	retryClosed time.Duration
	// err is why the limit WithKeyLimit gave is invalid: the key's requests
	// are refused.
	err error
	// maxLease is the most events a lease takes beyond a request's
	// (WithLeases): quota / maxLeaseShare, 0 if the algorithm cannot lease.
	maxLease int
	// step is the interval in ns of an algorithm that refills (a bucket's
	// TAT moves by it per event), and span its quota's worth (a bucket's
	// Burst × Interval); 0 for a window.
	step, span int64
}

// newKeyLimit returns the keyLimit of l for lim, with err set if the
// algorithm cannot take l.
func (lim *limiter) newKeyLimit(l keylimit.Limit) *keyLimit {
	k := &keyLimit{owner: lim, alg: lim.alg, limit: l, retryClosed: l.Interval()}
	p1, p2, quota, err := lim.alg.params(l)
	k.param1, k.param2, k.quota, k.err = p1, p2, quota, err
	if lim.alg.leases {
		k.maxLease = quota / maxLeaseShare
	}
	if lim.alg.refills {
		k.step = int64(l.Interval())
		k.span = k.step * int64(quota)
	}
	return k
}

// limitSet is one generation of a limiter's limits: its own, the per-key
// function (WithKeyLimit, SetKeyLimit; nil: none), and the limits that
// function has given keys since, one keyLimit per distinct Limit.
type limitSet struct {
	def      *keyLimit
	keyLimit func(string) keylimit.Limit
	byLimit  *xsync.MapOf[keylimit.Limit, *keyLimit] // nil without keyLimit
}

// newLimits makes l the limiter's limit and fn its per-key function, in a
// new generation.
func (lim *limiter) newLimits(l keylimit.Limit, fn func(string) keylimit.Limit) error {
	def := lim.newKeyLimit(l)
	if def.err != nil {
		return def.err
	}
	set := &limitSet{def: def, keyLimit: fn}
	if fn != nil {
		set.byLimit = xsync.NewMapOf[keylimit.Limit, *keyLimit]()
	}
	lim.limits.Store(set)
	return nil
}

// resolve returns the limit key is under now.
func (lim *limiter) resolve(key string) *keyLimit {
	set := lim.limits.Load()
	if set.keyLimit == nil {
		return set.def
	}
	l := set.keyLimit(key)
	if l == (keylimit.Limit{}) || l == set.def.limit {
		return set.def
	}
	if k, ok := set.byLimit.Load(l); ok {
		return k
	}
	k, _ := set.byLimit.LoadOrCompute(l, func() *keyLimit {
		k := lim.newKeyLimit(l)
		if k.err != nil {
			k.err = fmt.Errorf("keylimit: the limit WithKeyLimit gave this key is invalid: %w", k.err)
		}
		return k
	})
	return k
}

// Limit returns the limiter's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by WithKeyLimit are not under it.
func (lim *limiter) Limit() keylimit.Limit { return lim.limits.Load().def.limit }

// LimitOf returns the limit key is under now: its own, from WithKeyLimit, or
// the limiter's. httplimit reads it for each key's RateLimit-Policy.
func (lim *limiter) LimitOf(key string) keylimit.Limit { return lim.resolve(key).limit }

// SetLimit makes l the limiter's limit on this instance from its next
// decision on, and has WithKeyLimit's function asked anew. It returns an
// error, and changes nothing, if l is invalid (the constructor's errors).
//
// A key keeps what it used, as in memory: a bucket its debt in tokens, a
// fixed window the count of a window that has not ended, a sliding window
// its log. So a change never creates capacity; the bounds keylimit's types
// keep however often the limit changes hold here too. Instances share the
// keys' state, not their limits: set the limit on each. With WithLeases,
// every lease ends at once (none admits under the old limit), and what
// they held goes back to Redis in the background.
func (lim *limiter) SetLimit(l keylimit.Limit) error {
	lim.setMu.Lock()
	defer lim.setMu.Unlock()
	if err := lim.newLimits(l, lim.limits.Load().keyLimit); err != nil {
		return err
	}
	if s, ok := lim.fallback.(interface{ SetLimit(keylimit.Limit) error }); ok {
		// The fallback takes every share of a limit this limiter takes.
		_ = s.SetLimit(lim.policy.share(l))
	}
	lim.limitsChanged()
	return nil
}

// SetKeyLimit gives each key its own limit from now on: fn(key), asked on
// each decision, as WithKeyLimit does from the start (nil: every key is
// under the limiter's own limit again). A key keeps what it used, as
// across SetLimit; with WithLeases, every lease ends at once. It is
// keylimit's SetKeyLimit for the Redis limiters, and like SetLimit it
// changes this instance only: set it on each.
func (lim *limiter) SetKeyLimit(fn func(key string) keylimit.Limit) error {
	lim.setMu.Lock()
	defer lim.setMu.Unlock()
	if err := lim.newLimits(lim.limits.Load().def.limit, fn); err != nil {
		return err
	}
	if s, ok := lim.fallback.(interface {
		SetKeyLimit(func(string) keylimit.Limit) error
	}); ok {
		var share func(string) keylimit.Limit
		if fn != nil {
			share = fallbackKeyLimit(fn, lim.policy)
		}
		_ = s.SetKeyLimit(share)
	}
	lim.limitsChanged()
	return nil
}

// limitsChanged forgets what was decided under the old limits: refusals
// remembered may no longer hold, and leases end.
func (lim *limiter) limitsChanged() {
	lim.deny.clear()
	if lim.leases != nil {
		lim.leases.limitChanged()
	}
}

// clear forgets every refusal.
func (d *denyCache) clear() {
	if d.m == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.order, d.oldest = d.order[:0], 0
	d.m.Clear()
}

// fallbackKeyLimit is WithKeyLimit's function for the FailLocal fallback:
// each key's share of its limit.
func fallbackKeyLimit(f func(string) keylimit.Limit, p FailurePolicy) func(string) keylimit.Limit {
	return func(key string) keylimit.Limit {
		l := f(key)
		if l == (keylimit.Limit{}) {
			return l
		}
		return p.share(l)
	}
}
