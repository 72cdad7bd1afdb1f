package keylimit

import (
	"context"
	"sync/atomic"
	"time"
)

// TokenBucket limits each key to a rate with bursts: a bucket of
// Limit.BurstSize() tokens per key that refills continuously, one token every
// Limit.Interval(). An event takes one token; a key that has never been seen
// has a full bucket.
//
// It runs the generic cell rate algorithm (GCRA): each key's whole state is
// one int64, the theoretical arrival time (TAT), the instant at which its
// bucket will be full again. Refill is never computed or stored: the tokens
// at time now are (now + Burst×Interval − TAT) / Interval. So no fraction of
// a token is ever lost to rounding, however often the key is asked, and a
// key costs 8 bytes of state.
//
// Allow on an existing key reads the clock, loads the key without a lock and
// makes one compare-and-swap; it allocates nothing. A refused call writes
// nothing. All methods are safe for concurrent use; admissions are exact
// under any number of goroutines: over any interval of length d, a key admits
// at most BurstSize() + d/Interval() events.
type TokenBucket[K comparable] struct {
	*keyed[K, bucketState]
	gcra    gcra
	limit   Limit
	evictor *evictor
}

// bucketState is one key's state.
type bucketState struct {
	// tat is the theoretical arrival time in ns since the limiter's creation:
	// the bucket is full at any now >= tat. 0, a new key's value, is full from
	// the start. Only admissions write it, by CAS from the value they read, so
	// it only grows; the single exception is retirement (Reset, the evictor),
	// which swaps in retiredTAT, after which nothing writes it again and
	// callers look the key up afresh (store.replace).
	tat atomic.Int64
}

// retiredTAT marks a state that has left, or is leaving, the map. A live TAT
// is never negative: it starts at 0 and only grows.
const retiredTAT = -1

// retireIfIdle retires st if its bucket is full at now: then it is
// indistinguishable from a key never seen. Otherwise the bucket is full at
// its TAT.
func (st *bucketState) retireIfIdle(now int64) (bool, int64) {
	tat := st.tat.Load()
	if tat == retiredTAT {
		return false, now // being removed by Reset
	}
	return tat <= now && st.tat.CompareAndSwap(tat, retiredTAT), tat
}

// gcra is the arithmetic of one bucket limit. Every value is in ns.
type gcra struct {
	interval int64 // ns per token, Limit.Interval()
	tau      int64 // burst × interval: how far the TAT may run ahead of now
	burst    int
}

func newGCRA(l Limit) gcra {
	iv := int64(l.Interval())
	return gcra{interval: iv, tau: int64(l.BurstSize()) * iv, burst: l.BurstSize()}
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
	if err := l.Validate(); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	b := &TokenBucket[K]{
		keyed: newKeyed(o, stateHooks[K, bucketState]{
			newState:     func(K) *bucketState { return new(bucketState) },
			retireIfIdle: (*bucketState).retireIfIdle,
			retire:       func(st *bucketState) { st.tat.Store(retiredTAT) },
		}),
		gcra:  newGCRA(l),
		limit: l,
	}
	b.evictor = startEvictor(b, b.keyed, o, time.Duration(b.gcra.tau))
	return b, nil
}

// Limit returns the limit the bucket enforces.
func (b *TokenBucket[K]) Limit() Limit { return b.limit }

// Allow reports whether one event for key may happen now, and takes its token
// if so. Allow is shorthand for AllowN(key, 1).
func (b *TokenBucket[K]) Allow(key K) bool { return b.AllowN(key, 1) }

// AllowN reports whether n events for key may happen now, and takes their n
// tokens if so; otherwise it takes nothing. AllowN is Take(key, n).Allowed
// without the work of filling in the rest of the Result.
func (b *TokenBucket[K]) AllowN(key K, n int) bool {
	if n <= 0 || n > b.gcra.burst {
		return n == 0
	}
	ok, now, _, _ := b.decide(key, n)
	if now == untrackedTime {
		return b.overflow == admitUntracked
	}
	return ok
}

// Take takes n tokens from key's bucket if all n are there, and reports the
// decision and the bucket after it. A refused call changes nothing.
//
// n == 0 is always allowed and takes nothing. n < 0, or n above the burst,
// can never pass: the Result is refused with RetryAfter InfDuration.
func (b *TokenBucket[K]) Take(key K, n int) Result {
	if n <= 0 || n > b.gcra.burst {
		return b.impossible(key, n)
	}
	ok, now, base, next := b.decide(key, n)
	if now == untrackedTime {
		return b.untracked(b.gcra.burst, n)
	}
	if ok {
		return b.gcra.allowed(now, next)
	}
	return b.gcra.refused(now, base, next)
}

// decide admits n (1 <= n <= burst) events for key if they fit. It returns
// the decision, the time it was made at, max(TAT, now) before it, and the TAT
// that admitting them gives (the new TAT when ok). now is untrackedTime if the
// key could not be tracked (WithMaxKeys).
func (b *TokenBucket[K]) decide(key K, n int) (ok bool, now, base, next int64) {
	g := &b.gcra
	cost := int64(n) * g.interval
	st := b.loadOrCreate(key)
	for {
		if st == nil {
			return false, untrackedTime, 0, 0
		}
		// The clock is read inside the loop: a retry after a lost CAS must
		// not decide on a time older than the TAT it lost to.
		now = b.clock.now()
		tat := st.tat.Load()
		if tat == retiredTAT {
			st = b.replace(key, st)
			continue
		}
		base = max(tat, now)
		next = base + cost
		if next-now > g.tau {
			return false, now, base, next
		}
		if st.tat.CompareAndSwap(tat, next) {
			return true, now, base, next
		}
	}
}

// Peek reports the state of key's bucket now without taking anything: Allowed
// tells whether Allow(key) would pass, RetryAfter how long until it would.
// Peek does not create the key.
func (b *TokenBucket[K]) Peek(key K) Result {
	now := b.clock.now()
	return b.gcra.peek(now, b.loadTAT(key, now))
}

// Reset forgets key: its bucket is full again. Admissions that race with
// Reset happen either wholly before it (and are forgotten) or after it.
func (b *TokenBucket[K]) Reset(key K) { b.reset(key) }

// Len returns the number of keys the bucket tracks.
func (b *TokenBucket[K]) Len() int { return b.len() }

// Close stops the bucket's evictor. The bucket still answers after Close,
// exactly, but no longer forgets idle keys in the background. It always
// returns nil.
func (b *TokenBucket[K]) Close() error {
	b.evictor.close()
	return nil
}

// Refund gives back n events that Take or AllowN admitted for key, as if they
// had not been admitted: keylimit.All uses it to undo a partial admission.
// Refunding what was not admitted can fill a bucket early, never past full.
// n <= 0 does nothing.
func (b *TokenBucket[K]) Refund(key K, n int) {
	st := b.load(key)
	if st == nil || n <= 0 {
		return
	}
	cost := int64(min(n, b.gcra.burst)) * b.gcra.interval
	for {
		tat := st.tat.Load()
		if tat == retiredTAT || tat == 0 {
			return // forgotten or untouched: full already
		}
		if st.tat.CompareAndSwap(tat, max(tat-cost, 0)) {
			return
		}
	}
}

// Wait blocks until one event for key may happen, takes its token and
// returns nil. Wait is shorthand for WaitN(ctx, key, 1).
func (b *TokenBucket[K]) Wait(ctx context.Context, key K) error { return b.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and takes their tokens. It
// fails at once, taking nothing, if n can never pass (ErrExceedsLimit) or if
// the wait would outlast ctx's deadline; it returns ctx's error, wrapped, if
// ctx ends first. A failed wait takes nothing.
func (b *TokenBucket[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, b, &b.clock, key, n)
}

// loadTAT returns key's TAT, or 0 (full) for a key not tracked.
func (b *TokenBucket[K]) loadTAT(key K, now int64) int64 {
	st := b.load(key)
	if st == nil {
		return 0
	}
	if tat := st.tat.Load(); tat != retiredTAT {
		return tat
	}
	return 0
}

// impossible answers a Take that needs no CAS: n == 0 (allowed, takes
// nothing) and n that can never pass.
func (b *TokenBucket[K]) impossible(key K, n int) Result {
	r := b.Peek(key)
	r.Allowed = n == 0
	r.RetryAfter = 0
	if n != 0 {
		r.RetryAfter = InfDuration
	}
	return r
}

// remaining is the number of whole tokens in a bucket whose TAT is tat.
func (g *gcra) remaining(now, tat int64) int {
	r := (now + g.tau - tat) / g.interval
	return int(min(max(r, 0), int64(g.burst)))
}

func (g *gcra) allowed(now, tat int64) Result {
	return Result{
		Allowed:    true,
		Limit:      g.burst,
		Remaining:  g.remaining(now, tat),
		ResetAfter: time.Duration(tat - now),
	}
}

// refused reports a refusal: base is max(TAT, now), next what the TAT would
// have become had the request been admitted.
func (g *gcra) refused(now, base, next int64) Result {
	return Result{
		Limit:      g.burst,
		Remaining:  g.remaining(now, base),
		RetryAfter: time.Duration(next - now - g.tau),
		ResetAfter: time.Duration(base - now),
	}
}

func (g *gcra) peek(now, tat int64) Result {
	base := max(tat, now)
	if next := base + g.interval; next-now > g.tau {
		return g.refused(now, base, next)
	}
	r := g.allowed(now, base)
	return r
}
