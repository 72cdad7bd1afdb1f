package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// limiter is what the three Redis limiter types are: an algorithm, the
// limits its keys are under, the client, and what the options set. Its
// methods are the types' methods.
type limiter struct {
	client  redis.UniversalClient
	alg     *algorithm
	name    string        // the constructor's: the limiter's purpose, in logs and the default prefix
	prefix  string        // of every key written: prefix{key}
	timeout time.Duration // bound on one decision's wait for Redis
	policy  FailurePolicy
	onError func(error) // nil: errors are only returned
	clock   localClock
	// scriptClock is nil outside the package's tests: the scripts decide on
	// Redis server time.
	scriptClock *scriptClock
	deny        denyCache
	denySize    int           // the deny cache's size, for limiters joined with this one
	backoff     time.Duration // after a failure, how long not to ask Redis
	// downUntil is the local time (ns) before which Redis is not asked,
	// because it failed less than backoff ago; 0 while it works. Stored by
	// every call that sees Redis fail.
	downUntil atomic.Int64
	// fallback decides while Redis fails, under FailLocal; nil otherwise.
	fallback keylimit.Limiter[string]
	// self is the limiter this one is embedded in (*TokenBucket, ...), the
	// one keylimit.All and Join see.
	self keylimit.Limiter[string]
	// ops is what operators see: stats, outage logs, health checks.
	ops ops
	// leases are WithLeases's, key by key; nil without it.
	leases *leases

	// limits is the current generation of limits; SetLimit and
	// SetKeyLimit replace it, under setMu.
	limits atomic.Pointer[limitSet]
	setMu  sync.Mutex
}

// newFallbackFunc builds the in-process limiter that FailLocal decides
// with: a keylimit constructor of the same algorithm.
type newFallbackFunc func(keylimit.Limit, ...keylimit.Option) (keylimit.Limiter[string], error)

// init sets up lim, the limiter shared by the constructors, for alg and l.
// It is set up in place: lim holds atomics.
func (lim *limiter) init(self keylimit.Limiter[string], client redis.UniversalClient, name string, l keylimit.Limit,
	alg *algorithm, opts []Option, newFallback newFallbackFunc) error {
	lim.self = self
	lim.alg = alg
	if err := l.Validate(); err != nil {
		return err
	}
	if _, _, _, err := alg.params(l); err != nil {
		return err
	}
	o, err := buildOptions(name, opts)
	if err != nil {
		return err
	}
	if client == nil {
		return errors.New("redislimit: the Redis client is nil")
	}
	if err := checkClient(client); err != nil {
		return err
	}
	lim.client = client
	if err := lim.newLimits(l, o.keyLimit); err != nil {
		return err
	}
	lim.timeout = o.timeout
	lim.policy = o.policy
	lim.onError = o.onError
	lim.clock = newLocalClock(o.clock)
	lim.scriptClock = o.scriptClock
	lim.ops.init(o)
	lim.deny.init(o.denyCache, &lim.ops.counts)
	lim.denySize = o.denyCache
	lim.backoff = o.backoff
	lim.name = o.name
	lim.prefix = o.keyPrefix(alg.name, l, lim.limits.Load().def.quota)
	if o.policy.kind == failLocal {
		var opts []keylimit.Option
		if o.clock != nil {
			opts = append(opts, keylimit.WithClock(o.clock))
		}
		if o.keyLimit != nil {
			opts = append(opts, keylimit.WithKeyLimit(fallbackKeyLimit(o.keyLimit, o.policy)))
		}
		fb, err := newFallback(o.policy.share(l), opts...)
		if err != nil {
			return fmt.Errorf("redislimit: the FailLocal fallback limiter: %w", err)
		}
		lim.fallback = fb
	}
	if o.leaseTime > 0 {
		if !alg.leases {
			return fmt.Errorf("redislimit: WithLeases does not apply to a %s window: its log holds each admission's "+
				"time, and an event leased at one time and spent later would leave the window too early", alg.name)
		}
		lim.leases = newLeases(lim, o.leaseTime)
	}
	lim.announce(o.policySet || o.fleet > 0)
	return nil
}

// redisKey is the Redis key of key's state: prefix{key}. The braces make
// key the hash tag, so that on Redis Cluster the states of one key under
// several limiters share a slot, and one script call can decide for them
// all (see Join).
func (lim *limiter) redisKey(key string) string {
	return lim.prefix + "{" + key + "}"
}

// checkClient refuses a client known to ignore context deadlines: with it,
// a stalled Redis would hold each decision for the client's own read
// timeout (5 s by default), whatever WithTimeout says.
func checkClient(c redis.UniversalClient) error {
	var enabled bool
	switch c := c.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return nil // an unknown implementation: trust it
	}
	if !enabled {
		return errors.New("redislimit: the Redis client ignores context deadlines, so a stalled Redis " +
			"would hold every decision for the client's read timeout; set ContextTimeoutEnabled: true in its Options")
	}
	return nil
}

// Name returns the name the limiter was made with.
func (l *limiter) Name() string { return l.name }

// Prefix returns the prefix of the Redis keys the limiter writes: the state
// of key k is at Prefix() + "{" + k + "}".
func (l *limiter) Prefix() string { return l.prefix }

// Allow reports whether one event for key may happen now, and records it in
// Redis if so. Allow is shorthand for AllowN(key, 1).
func (l *limiter) Allow(key string) bool { return l.Take(key, 1).Allowed }

// AllowN reports whether n events for key may happen now, and records all n
// in Redis if so; otherwise it records nothing. AllowN is Take(key,
// n).Allowed.
func (l *limiter) AllowN(key string, n int) bool {
	if l.leases != nil {
		if _, _, _, ok := l.leases.fast(key, n); ok {
			l.ops.counts.decided(true)
			return true
		}
	}
	return l.Take(key, n).Allowed
}

// Take records n events for key in Redis if all n fit, else nothing, and
// reports the decision and the key's state after it. It is TakeContext with
// context.Background(), the error left to WithOnError.
func (l *limiter) Take(key string, n int) keylimit.Result {
	if l.leases != nil {
		if p, left, now, ok := l.leases.fast(key, n); ok {
			l.ops.counts.decided(true)
			return p.result(left, now)
		}
	}
	r, _, _ := l.AdmitContext(context.Background(), key, n)
	return r
}

// TakeContext is Take with a context: the call waits for Redis until ctx's
// deadline or the limiter's timeout, whichever is first, and the client
// sees ctx's values (for tracing). A ctx that has ended makes no call: the
// Result is refused and the error is ctx's. A ctx cancelled during the call
// abandons the decision the same way, with no failure policy asked, when
// the call returns (go-redis stops a call at a deadline, not at a cancel);
// a deadline that passes during the call is a failure of Redis to answer
// in time, and the policy answers.
//
// n == 0 is always allowed and records nothing (it asks Redis for the
// key's state, as Peek does). n < 0, or n above the key's quota, can never
// pass: the Result is refused with RetryAfter keylimit.InfDuration,
// answered without a round trip (its Remaining and ResetAfter are then 0:
// unknown). A request that the deny cache covers is refused without a round
// trip too (see WithDenyCacheSize), and one that a live lease covers is
// admitted without one (see WithLeases).
//
// If Redis fails, the Result is the failure policy's and err, a *Error,
// says why; the error went to the WithOnError callback as well.
func (l *limiter) TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error) {
	r, _, err := l.AdmitContext(ctx, key, n)
	return r, err
}

// Admit is Take, and also returns what an admission took, for Refund.
func (l *limiter) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r, a, _ := l.AdmitContext(context.Background(), key, n)
	return r, a
}

// AdmitContext is TakeContext, and also returns what an admission took, for
// RefundContext: the mark the script wrote (a bucket's TAT, a window's
// index, a log entry's time) and, as its By, the limit the key was under;
// or the fallback limiter's Admission when the failure policy admitted.
func (l *limiter) AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	r, a, err := l.admit(ctx, key, n)
	l.ops.counts.decided(r.Allowed)
	return r, a, err
}

// admit is AdmitContext, not counted in Stats.
func (l *limiter) admit(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	k := l.resolve(key)
	if r, ok := k.never(n); ok {
		return r, keylimit.Admission{}, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: k.quota}, keylimit.Admission{}, l.report("take", key, err)
	}
	if n == 0 {
		r, err := l.peek(ctx, key, k)
		r.Allowed, r.RetryAfter = true, 0
		return r, keylimit.Admission{}, err
	}
	if l.leases != nil {
		return l.leases.admit(ctx, key, n, k)
	}
	return l.take(ctx, key, n, k, l.clock.now())
}

// take decides n events (n >= 1) for key under k at local time now, in one
// script call unless the deny cache answers: admit without leases.
func (l *limiter) take(ctx context.Context, key string, n int, k *keyLimit, now int64) (keylimit.Result, keylimit.Admission, error) {
	if r, ok := l.cached(key, n, k, now); ok {
		return r, keylimit.Admission{}, nil
	}
	var res [1]keylimit.Result
	var marks [1]int64
	if err := l.call(ctx, modeTake, key, n, k, 0, now, res[:], marks[:]); err != nil {
		return l.failed(ctx, "take", key, k, n, err)
	}
	r := res[0]
	// now was read before the round trip, so the remembered refusal ends a
	// little before Redis's: the cache errs towards asking again.
	l.deny.record(key, n, r, now)
	if !r.Allowed {
		return r, keylimit.Admission{}, nil
	}
	return r, keylimit.Admission{N: n, Mark: marks[0], By: k}, nil
}

// never answers a request of n events that can never pass under k without
// a round trip: n < 0, n above the quota, or an invalid limit from
// WithKeyLimit.
func (k *keyLimit) never(n int) (keylimit.Result, bool) {
	if k.err != nil {
		return keylimit.Result{Limit: k.quota, RetryAfter: keylimit.InfDuration, Err: k.err}, true
	}
	if n < 0 || n > k.quota {
		return keylimit.Result{Limit: k.quota, RetryAfter: keylimit.InfDuration}, true
	}
	return keylimit.Result{}, false
}

// cached answers a request of n events for key, under k, from the deny
// cache at local time now, if a refusal made under the same quota covers
// it.
func (l *limiter) cached(key string, n int, k *keyLimit, now int64) (keylimit.Result, bool) {
	r, ok := l.deny.check(key, n, now)
	if ok && r.Limit != k.quota {
		// Remembered under another limit: SetLimit, or WithKeyLimit's
		// function, has changed it since.
		l.deny.forget(key)
		return keylimit.Result{}, false
	}
	return r, ok
}

// Peek reports key's state now, recording nothing: Allowed tells whether
// Allow(key) would pass, RetryAfter how long until it would. It is
// PeekContext with context.Background(), the error left to WithOnError.
func (l *limiter) Peek(key string) keylimit.Result {
	r, _ := l.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek with a context, as TakeContext is Take. A key the
// deny cache covers for one event is answered without a round trip, and so
// is one whose lease holds an event (WithLeases).
func (l *limiter) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	k := l.resolve(key)
	if k.err != nil {
		r, _ := k.never(1)
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: k.quota}, l.report("peek", key, err)
	}
	return l.peek(ctx, key, k)
}

// peek is PeekContext for key under k, once ctx is known to be live.
func (l *limiter) peek(ctx context.Context, key string, k *keyLimit) (keylimit.Result, error) {
	now := l.clock.now()
	if l.leases != nil {
		if r, ok := l.leases.peek(key, k, now); ok {
			return r, nil
		}
	}
	if r, ok := l.cached(key, 1, k, now); ok {
		return r, nil
	}
	var res [1]keylimit.Result
	var marks [1]int64
	if err := l.call(ctx, modePeek, key, 1, k, 0, now, res[:], marks[:]); err != nil {
		r, _, err := l.failed(ctx, "peek", key, k, 0, err)
		return r, err
	}
	return res[0], nil
}

// Reset forgets key, on Redis and in this instance's deny cache: its next
// event meets a full quota. It is ResetContext with context.Background(),
// the error left to WithOnError.
func (l *limiter) Reset(key string) { _ = l.ResetContext(context.Background(), key) }

// ResetContext is Reset with a context. It deletes the key's state in one
// DEL. It asks Redis even during the failure backoff, since a lost Reset
// would go unnoticed (a user locked out after a successful login). If Redis
// fails, or ctx has ended (then no call is made), the error is returned
// (and passed to WithOnError) and only the local state is forgotten.
func (l *limiter) ResetContext(ctx context.Context, key string) error {
	l.deny.forget(key)
	if l.leases != nil {
		l.leases.forget(key)
	}
	if l.fallback != nil {
		l.fallback.Reset(key)
	}
	if err := ctx.Err(); err != nil {
		return l.report("reset", key, err)
	}
	now := l.clock.now()
	c, tctx, cancel := startCall(ctx, l.timeout)
	err := l.client.Del(tctx, l.redisKey(key)).Err()
	c.end(cancel)
	l.called(ctx, err, now)
	if err != nil {
		return l.report("reset", key, err)
	}
	return nil
}

// Refund gives back what a, an Admission this limiter made for key, still
// holds, in Redis, as keylimit.Refunder says: a bucket the tokens that have
// not refilled, a fixed window the events of a window that has not ended, a
// sliding log the entries still in it. After a change of the key's limit
// to one of another interval (a bucket) or period (a fixed window), it
// gives back nothing. An Admission a lease made (WithLeases) goes back to
// the lease while it lasts, without a round trip. It is RefundContext with
// context.Background(), the error left to WithOnError.
func (l *limiter) Refund(key string, a keylimit.Admission) {
	_ = l.RefundContext(context.Background(), key, a)
}

// RefundContext is Refund with a context, in one script call; a ctx that
// has ended makes no call. An Admission the fallback limiter made (Redis was
// failing then) is refunded there. If Redis fails, the error is returned
// (and passed to WithOnError).
func (l *limiter) RefundContext(ctx context.Context, key string, a keylimit.Admission) error {
	if a.N <= 0 {
		return nil
	}
	if p, ok := a.By.(*lease); ok {
		if p.owner == nil || p.owner != l.leases {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return l.report("refund", key, err)
		}
		return l.leases.refund(ctx, key, p, a.N)
	}
	k, ok := a.By.(*keyLimit)
	if !ok || k.owner != l {
		if r, ok := l.fallback.(keylimit.Refunder[string]); ok && a.By == l.fallback {
			r.Refund(key, a)
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return l.report("refund", key, err)
	}
	l.deny.forget(key)
	var res [1]keylimit.Result
	var marks [1]int64
	if err := l.call(ctx, modeRefund, key, min(a.N, k.quota), k, a.Mark, l.clock.now(), res[:], marks[:]); err != nil {
		return l.report("refund", key, err)
	}
	return nil
}

// Close releases the fallback limiter, if any, and with WithLeases gives
// back to Redis what the leases hold (a call per leased key) and stops
// leasing. It does not close the Redis client, which the caller owns. The
// limiter still answers after Close, without leases. It always returns
// nil.
func (l *limiter) Close() error {
	if l.leases != nil {
		l.leases.close()
	}
	if c, ok := l.fallback.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// call makes one script call for key under k alone at local time now,
// unless Redis failed less than the backoff ago, and writes the Result and
// the mark of an admission into res[0] and marks[0]. mark is the admission
// a refund gives back.
func (l *limiter) call(ctx context.Context, mode any, key string, n int, k *keyLimit, mark, now int64,
	res []keylimit.Result, marks []int64) error {
	parts := [1]*keyLimit{k}
	in := [1]int64{mark}
	d := decision{key: key, n: n, parts: parts[:], marks: in[:]}
	return l.run(ctx, mode, &d, now, res, marks)
}

// run makes the script call d in mode at local time now, unless Redis
// failed less than the backoff ago.
func (l *limiter) run(ctx context.Context, mode any, d *decision, now int64, res []keylimit.Result, marks []int64) error {
	if err := l.down(now); err != nil {
		return err
	}
	err := d.run(ctx, mode, l.client, l.timeout, l.scriptClock, res, marks)
	l.called(ctx, err, now)
	return err
}

// The Redis limiters are keylimit limiters, and can give events back, so
// keylimit.All can combine them (with each other or with in-memory ones);
// Redis limiters on one client, All joins in one script call.
var (
	_ keylimit.ContextLimiter[string]  = (*TokenBucket)(nil)
	_ keylimit.ContextRefunder[string] = (*TokenBucket)(nil)
	_ keylimit.Joiner[string]          = (*TokenBucket)(nil)
	_ keylimit.ContextLimiter[string]  = (*FixedWindow)(nil)
	_ keylimit.ContextRefunder[string] = (*FixedWindow)(nil)
	_ keylimit.Joiner[string]          = (*FixedWindow)(nil)
	_ keylimit.ContextLimiter[string]  = (*SlidingWindow)(nil)
	_ keylimit.ContextRefunder[string] = (*SlidingWindow)(nil)
	_ keylimit.Joiner[string]          = (*SlidingWindow)(nil)
)
