package keylimit

import (
	"context"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// TokenBucket limits each key to a rate with bursts: a bucket of
// Limit.BurstSize() tokens per key that refills continuously, one token every
// Period/Events (rounded up to a nanosecond, so that it never refills faster
// than the limit). An event takes one token; a key never seen has a full
// bucket.
//
// It runs the generic cell rate algorithm (GCRA): a key's whole state is one
// int64, the time at which its bucket is full again (the theoretical arrival
// time, TAT), updated by one compare-and-swap. Refill is never stored, so no
// fraction of a token is lost to rounding however often a key is asked.
// Over any interval of length d, a key admits at most BurstSize() +
// d×Events/Period events, under any number of goroutines.
//
// SetLimit keeps a key's debt in tokens, even beyond the new burst, so over
// any interval a key admits at most the larger burst plus the faster rate,
// however often the limit changes.
type TokenBucket[K comparable] struct {
	Keyed[K]

	keys    *shard[K, bucketState]
	policy  *policy[K, gcra] // not inline: the evictor holds it, and must not hold the bucket
	evictor *evictor
	queues  waitQueues[K] // the waiters of Wait, by key
}

// bucketState is one key's state.
type bucketState struct {
	// tat is the theoretical arrival time in ns since the limiter's creation:
	// the bucket is full at any now >= tat. freshTAT, a new key's value, is
	// before any time the clock gives. Admissions write it by CAS from the
	// value they read, so it only grows (Refund moves it back by CAS). The
	// exceptions are sentinels below freshTAT: retirement (Reset, the
	// evictor) swaps in retiredTAT, after which nothing writes it again and
	// callers look the key up afresh (shard.replace); a change of limit
	// swaps in convertingTAT while it moves the state to the new limit.
	tat atomic.Int64
	// cfg is the limit the TAT is under. It is written when the state is
	// made, and after that only while tat holds convertingTAT.
	cfg atomic.Pointer[keyConfig[gcra]]
}

const (
	freshTAT      = -1 << 62          // a new key's: full at any time, before the creation too
	retiredTAT    = math.MinInt64     // the state has left, or is leaving, the map
	convertingTAT = math.MinInt64 + 1 // the state is moving to a new limit; wait
)

// retireIfIdle retires st if its bucket is full at now: then it is
// indistinguishable from a key never seen. Otherwise the bucket is full at
// its TAT.
func (st *bucketState) retireIfIdle(now int64) (bool, int64) {
	tat := st.tat.Load()
	if tat < freshTAT {
		return false, now // being removed, or converted
	}
	return tat <= now && st.tat.CompareAndSwap(tat, retiredTAT), tat
}

// retire retires st whatever its state, waiting out a conversion.
func (st *bucketState) retire() {
	for {
		tat := st.tat.Load()
		if tat == convertingTAT {
			runtime.Gosched()
			continue
		}
		if tat == retiredTAT || st.tat.CompareAndSwap(tat, retiredTAT) {
			return
		}
	}
}

// gcra is the arithmetic of one bucket limit. Every value is in ns.
type gcra struct {
	interval int64 // ns per token, Limit.interval()
	tau      int64 // burst × interval: how far the TAT may run ahead of now
	burst    int
}

func newGCRA(l Limit) (gcra, error) {
	if err := l.Validate(); err != nil {
		return gcra{}, err
	}
	iv := int64(l.interval())
	return gcra{interval: iv, tau: int64(l.BurstSize()) * iv, burst: l.BurstSize()}, nil
}

// NewTokenBucket returns a TokenBucket that admits l.Events per l.Period per
// key, at most l.BurstSize() at once. It returns an error if l or an option
// is invalid.
//
// The bucket forgets a key once its bucket is full again (see
// WithEvictionInterval and WithMaxKeys). Call Close when done with it to stop
// its evictor at once; a bucket dropped without Close stops it once the
// garbage collector finds it unreachable.
func NewTokenBucket[K comparable](l Limit, opts ...Option) (*TokenBucket[K], error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	pol := new(policy[K, gcra])
	if err := pol.init(l, newGCRA); err != nil {
		return nil, err
	}
	b := &TokenBucket[K]{policy: pol}
	b.Keyed = Keyed[K]{of: b, bucket: b}
	b.keys = newShard(o, stateHooks[K, bucketState]{
		newState: func(key K) *bucketState {
			st := new(bucketState)
			st.tat.Store(freshTAT)
			st.cfg.Store(pol.resolve(key))
			return st
		},
		retireIfIdle: (*bucketState).retireIfIdle,
		retire:       (*bucketState).retire,
	})
	// The bucket's own limit gives the default sweep interval.
	b.evictor = startEvictor(b, b.keys, o, time.Duration(pol.own().arith.tau))
	return b, nil
}

// Allow reports whether one event for key may happen now, and takes its token
// if so. Allow is shorthand for AllowN(key, 1).
//
// Allow is small enough for the type's own Allow, the method an interface
// calls, to inline, so that it calls decide itself (see decide).
func (b *TokenBucket[K]) Allow(key K) bool { return b.decide(key, 1, nil) }

// AllowN reports whether n events for key may happen now, and takes their n
// tokens if so; otherwise it takes nothing. AllowN is Take(key, n).Allowed
// without the work of filling in the rest of the Result.
func (b *TokenBucket[K]) AllowN(key K, n int) bool {
	if n <= 0 {
		return n == 0
	}
	return b.decide(key, n, nil)
}

// Take takes n tokens from key's bucket if all n are there, and reports the
// decision and the bucket after it. A refused call changes nothing.
//
// n == 0 is always allowed and takes nothing. n < 0, or n above the burst,
// can never pass: the Result is refused with RetryAfter InfDuration.
func (b *TokenBucket[K]) Take(key K, n int) (r Result) {
	b.admit(key, n, nil, nil, &r)
	return
}

// admitPart is Admit for All, without the once (see partAdmitter).
func (b *TokenBucket[K]) admitPart(_ context.Context, key K, n int) (r Result, a Admission, err error) {
	b.admit(key, n, &a, nil, &r)
	return // naked, as Admit's
}

// admit is Take, writing its Result to r, and when a is not nil and the
// tokens are taken, fills in their Admission, with a once from o if o is
// not nil (Admit's). *r and *a are zero until then: an admission writes
// only the fields it sets, where a Result or an Admission returned by
// value is copied at each return (issue 36).
func (b *TokenBucket[K]) admit(key K, n int, a *Admission, o *onces, r *Result) {
	if n <= 0 {
		*r = impossible(b.Peek(key), n)
		return
	}
	var d bucketDecision
	b.decide(key, n, &d)
	c, v := d.c, d.v
	b.keys.counts.admits(v, b.keys.overflow)
	switch v {
	case untracked:
		*r = b.keys.untracked(c.arith.burst, n)
		return
	case never:
		*r = impossible(b.Peek(key), n)
		return
	case refused:
		c.arith.refusedTo(r, d.now, d.base, d.next)
		return
	}
	// Admitted.
	if a != nil {
		// Field by field: *a is zero, and a literal would be built and
		// then copied.
		a.N, a.Mark, a.By, a.state, a.key, a.unit = n, d.next, b, d.st, d.key, c.arith.interval
		if o != nil {
			a.once, a.slot = o.take(d.key, n)
		}
	}
	c.arith.allowedTo(r, d.now, d.next)
}

// bucketDecision is a decision on n tokens made at now: base is max(TAT,
// now) before it, next the TAT that admitting them gives (the new TAT when
// admitted).
type bucketDecision struct {
	c *keyConfig[gcra] // the limit decided under
	v verdict
	// ahead, set by the caller, is how far beyond a full bucket's debt the
	// TAT may run: 0 for Take, a reservation's greatest delay for Reserve.
	ahead           int64
	now, base, next int64
	st              *bucketState // the state decided on
	key             uint64       // the key's hash, for an Admission
}

// decide takes n >= 1 tokens for key if they are there, and reports
// whether Allow passes them: admitted, or untracked under
// WithAdmitUntracked. With d nil (Allow's call, ahead 0) it counts the
// verdict for Stats (see shardStats.count); otherwise it writes to d the
// limit it decided under and its verdict, and the decision when admitted
// or refused, and the caller counts. Allow's call is so small that the
// type's Allow inlines it and calls decide itself (go build -gcflags=-m:
// "inlining call to (*TokenBucket[go.shape.string]).Allow"): one frame
// fewer on every call.
func (b *TokenBucket[K]) decide(key K, n int, d *bucketDecision) bool {
	h := b.keys.hash(key)
	st := b.keys.lookup(h)
	if st == nil {
		// A request that can never pass must not create the key.
		if c := b.policy.resolve(key); c.err != nil || n > c.arith.burst {
			return b.finish(d, c, never)
		}
		if st = b.keys.loadOrCreate(key); st == nil {
			return b.finish(d, b.policy.resolve(key), untracked)
		}
	}
	// The loop works on locals, and writes d once, when it returns.
	var ahead int64
	if d != nil {
		ahead = d.ahead
	}
	// The clock is read before the TAT, after the state was found: the
	// TAT's load and its CAS are then a few instructions apart, so another
	// caller of a hot key rarely takes the line between them. A reading
	// older than some admission the TAT holds only makes a decision
	// stricter, and a refusal stands on it only if the state did not move
	// while the clock was read (see DESIGN.md, "Stale clock readings").
	c0, seen := st.cfg.Load(), st.tat.Load() // the state before the reading
	var now int64
	if clk := &b.keys.clock; clk.injected == nil {
		// timeSource.now's system clock, by hand: now is too large to
		// inline, and its call is 20 instructions of a refusal's 400.
		now = clampTime(int64(time.Since(clk.start)))
	} else {
		now = clk.now()
	}
	tat := st.tat.Load()
	var bo backoff
	for {
		if tat < freshTAT {
			if st = b.settle(key, st, tat); st == nil {
				return b.finish(d, b.policy.resolve(key), untracked)
			}
			// Another state: only a reading taken after it decides on it.
			c0, seen = st.cfg.Load(), st.tat.Load()
			now, tat = b.keys.clock.now(), st.tat.Load()
			continue
		}
		c := st.cfg.Load()
		if b.policy.stale(c) {
			b.convert(key, st, tat, c)
			c0, seen = st.cfg.Load(), st.tat.Load()
			now, tat = b.keys.clock.now(), st.tat.Load()
			continue
		}
		g := &c.arith
		if c.err != nil || n > g.burst {
			return b.finish(d, c, never)
		}
		base := max(tat, now)
		next := base + int64(n)*g.interval
		if over := next - now - g.tau - ahead; over > 0 {
			if tat != seen || c != c0 {
				// The state moved while the clock was read: the reading
				// may be older than an admission it now holds, or than
				// its conversion (which may leave the TAT as it was). A
				// reading taken after these loads decides.
				c0, seen, now = c, tat, b.keys.clock.now()
				continue
			}
			if d == nil {
				b.keys.counts.count(refused, b.keys.overflow)
				return false
			}
			d.c, d.v, d.now, d.base, d.next = c, refused, now, base, next
			return false
		}
		if st.tat.CompareAndSwap(tat, next) {
			if d == nil {
				b.keys.counts.count(admitted, b.keys.overflow)
				return true
			}
			d.c, d.v, d.now, d.base, d.next, d.st, d.key = c, admitted, now, base, next, st, h
			return true
		}
		// Lost to another caller of the key: let it run on, then try
		// afresh (see backoff).
		bo.Wait()
		c0, seen = st.cfg.Load(), st.tat.Load()
		now, tat = b.keys.clock.now(), st.tat.Load()
	}
}

// finish is decide's return for a verdict off the hot path, never or
// untracked, decided under c (see decide).
func (b *TokenBucket[K]) finish(d *bucketDecision, c *keyConfig[gcra], v verdict) bool {
	if d == nil {
		b.keys.counts.count(v, b.keys.overflow)
	} else {
		d.c, d.v = c, v
	}
	return b.keys.overflow.allows(v)
}

// settle deals with a sentinel TAT: it waits out a conversion, or replaces a
// retired state. It returns the state to go on with, or nil if the key can no
// longer be tracked.
func (b *TokenBucket[K]) settle(key K, st *bucketState, tat int64) *bucketState {
	if tat == convertingTAT {
		runtime.Gosched()
		return st
	}
	return b.keys.replace(key, st)
}

// convert moves st, whose TAT is tat under the stale config old, to the
// key's current limit. If another caller changes st first, it does nothing;
// the caller retries either way.
func (b *TokenBucket[K]) convert(key K, st *bucketState, tat int64, old *keyConfig[gcra]) {
	if !st.tat.CompareAndSwap(tat, convertingTAT) {
		return
	}
	c := b.policy.resolve(key)
	now := b.keys.clock.now()
	next := tat
	if tat > now && c.err == nil {
		// Keep the debt in tokens: (tat-now)/old interval tokens owed
		// become as many new intervals, rounded up. The debt is not capped
		// at the new burst: forgiving any of it would let a limit flipped
		// back and forth admit more than either limit allows.
		next = now + scaleUp(tat-now, c.arith.interval, old.arith.interval)
	}
	st.cfg.Store(c)
	st.tat.Store(next)
}

// scaleUp returns ceil(x × mul / div) for positive values, computed in 128
// bits, at most maxSpan.
func scaleUp(x, mul, div int64) int64 {
	hi, lo := bits.Mul64(uint64(x), uint64(mul))
	if hi >= uint64(div) {
		return int64(maxSpan)
	}
	q, r := bits.Div64(hi, lo, uint64(div))
	if r != 0 {
		q++
	}
	return int64(min(q, uint64(maxSpan)))
}

// peekKey is Peek, writing its Result to r, a zero Result.
func (b *TokenBucket[K]) peekKey(key K, r *Result) {
	now := b.keys.clock.now()
	tat, c := b.observe(key)
	if c.err != nil {
		*r = Result{Limit: c.arith.burst, RetryAfter: InfDuration, Err: c.err}
		return
	}
	c.arith.peekTo(r, now, tat)
}

// observe returns key's TAT and the limit it is under, or freshTAT and the
// key's limit for a key not tracked. A state under a stale limit is
// reported as it would be after its conversion.
func (b *TokenBucket[K]) observe(key K) (int64, *keyConfig[gcra]) {
	for {
		st := b.keys.load(key)
		if st == nil {
			return freshTAT, b.policy.resolve(key)
		}
		tat := st.tat.Load()
		switch {
		case tat == retiredTAT:
			return freshTAT, b.policy.resolve(key)
		case tat == convertingTAT:
			runtime.Gosched()
			continue
		}
		c := st.cfg.Load()
		if b.policy.stale(c) {
			b.convert(key, st, tat, c)
			continue
		}
		return tat, c
	}
}

// resetKey is Reset.
func (b *TokenBucket[K]) resetKey(key K) { b.keys.reset(key) }

// stats is Stats.
func (b *TokenBucket[K]) stats() Stats { return b.keys.stats() }

// timers is the clock the bucket reads: WithClock's, or the system clock.
func (b *TokenBucket[K]) timers() clock.Clock { return b.keys.clock.timers }

// stop stops the evictor.
func (b *TokenBucket[K]) stop() { b.evictor.close() }

// limits is the limiter's policy, for its Keyed.
func (b *TokenBucket[K]) limits() keyLimits[K] { return b.policy }

// refundKey is Refund.
func (b *TokenBucket[K]) refundKey(key K, a *Admission) {
	if !madeBy(a.By, b) || !b.keys.ofKey(key, a) {
		return
	}
	if n, ok := a.claim(); ok {
		b.refundMoving(a, n, nil)
	}
}

// refund gives back what a, an Admission of the bucket's own (a
// reservation's), still holds, and returns how far it moved the TAT back,
// in ns.
func (b *TokenBucket[K]) refund(a *Admission) int64 { return b.refundMoving(a, a.N, nil) }

// refundMoving is refund of n of a's events, where movable, if not nil,
// reports whether every admission in the TAT after a's (tat, in intervals
// of interval ns) is one the caller moves up by what is given back: then
// none keeps its time, and the refund counts from now, not from tat − tau
// (see giveBack).
func (b *TokenBucket[K]) refundMoving(a *Admission, n int, movable func(tat, interval int64) bool) int64 {
	st, ok := a.state.(*bucketState)
	if !ok || n <= 0 || !madeBy(a.By, b) {
		return 0
	}
	for {
		tat := st.tat.Load()
		switch {
		case tat == convertingTAT:
			runtime.Gosched()
			continue
		case tat == retiredTAT:
			return 0 // Reset, or evicted once full (so nothing to give)
		}
		g := &st.cfg.Load().arith
		if g.interval != a.unit {
			return 0 // converted: the TAT counts in other intervals now
		}
		// The clock is read after the TAT, so every admission in it decided
		// at or before now. An admission never writes a TAT more than tau
		// after its time, so tat − tau is a time some admission reached:
		// after an injected clock stepped back, the refund counts from
		// there, never from before it. (See DESIGN.md, "Exact refunds".)
		now := b.keys.clock.now()
		if movable == nil || !movable(tat, g.interval) {
			now = max(now, tat-g.tau)
		}
		back := min(int64(n)*g.interval, a.Mark-now, tat-now)
		if back <= 0 {
			return 0
		}
		if st.tat.CompareAndSwap(tat, tat-back) {
			return back
		}
	}
}

// remaining is the number of whole tokens in a bucket whose TAT is tat.
func (g *gcra) remaining(now, tat int64) int {
	r := (now + g.tau - tat) / g.interval
	return int(min(max(r, 0), int64(g.burst)))
}

// result reports decision d: admitted (ok) or refused.
func (g *gcra) result(ok bool, d *bucketDecision) Result {
	if ok {
		return g.allowed(d.now, d.next)
	}
	return g.refused(d.now, d.base, d.next)
}

// allowed reports an admission, or a Peek that would pass, after which the
// TAT is tat.
func (g *gcra) allowed(now, tat int64) Result {
	k := g.remaining(now, tat)
	return Result{
		Allowed:     true,
		Limit:       g.burst,
		Remaining:   k,
		ResetAfter:  time.Duration(tat - now),
		RefillAfter: g.refill(now, tat, k),
	}
}

// allowedTo is allowed, written to r, a zero Result, field by field.
func (g *gcra) allowedTo(r *Result, now, tat int64) {
	k := g.remaining(now, tat)
	r.Allowed, r.Limit, r.Remaining = true, g.burst, k
	r.ResetAfter, r.RefillAfter = time.Duration(tat-now), g.refill(now, tat, k)
}

// refused reports a refusal: base is max(TAT, now), next what the TAT would
// have become had the request been admitted.
func (g *gcra) refused(now, base, next int64) Result {
	k := g.remaining(now, base)
	return Result{
		Limit:       g.burst,
		Remaining:   k,
		RetryAfter:  time.Duration(next - now - g.tau),
		ResetAfter:  time.Duration(base - now),
		RefillAfter: g.refill(now, base, k),
	}
}

// refusedTo is refused, written to r, a zero Result, field by field.
func (g *gcra) refusedTo(r *Result, now, base, next int64) {
	k := g.remaining(now, base)
	r.Limit, r.Remaining, r.RetryAfter = g.burst, k, time.Duration(next-now-g.tau)
	r.ResetAfter, r.RefillAfter = time.Duration(base-now), g.refill(now, base, k)
}

// refill is the time until a bucket whose TAT is tat, holding k whole
// tokens at now (g.remaining), holds one more: when the TAT is (k+1)
// intervals less than tau ahead; 0 if the bucket is full.
func (g *gcra) refill(now, tat int64, k int) time.Duration {
	if tat <= now {
		return 0
	}
	return time.Duration(tat - now - g.tau + int64(k+1)*g.interval)
}

// peekTo writes to r, a zero Result, what a request of one token would
// meet at now.
func (g *gcra) peekTo(r *Result, now, tat int64) {
	base := max(tat, now)
	if next := base + g.interval; next-now > g.tau {
		g.refusedTo(r, now, base, next)
		return
	}
	g.allowedTo(r, now, base)
}
