package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// limiter is what the three Redis limiter types are: an algorithm (a Lua
// script and its parameters), the client, and what the options set. Its
// methods are the types' methods.
type limiter struct {
	client  redis.UniversalClient
	alg     algorithm
	limit   keylimit.Limit
	name    string        // the constructor's: the limiter's purpose, in logs and the default prefix
	prefix  string        // of every key written: prefix + key
	timeout time.Duration // bound on one decision's wait for Redis
	policy  FailurePolicy
	onError func(error) // nil: errors are only returned
	clock   localClock
	deny    denyCache
	backoff time.Duration // after a failure, how long not to ask Redis
	// downUntil is the local time (ns) before which Redis is not asked,
	// because it failed less than backoff ago; 0 while it works. Stored by
	// every call that sees Redis fail.
	downUntil atomic.Int64
	// fallback decides while Redis fails, under FailLocal; nil otherwise.
	fallback keylimit.Limiter[string]
	// self is the limiter this one is embedded in (*TokenBucket, ...): the
	// By of its Admissions.
	self any
	// ops is what operators see: stats, outage logs, health checks.
	ops ops
}

// algorithm is what distinguishes a token bucket from a window: its script
// and the two parameters the script takes after the mode and n.
type algorithm struct {
	name   string // in the default prefix: "bucket", "fixed", "sliding"
	script *redis.Script
	// arg3 and arg4 are ARGV[3] and ARGV[4], boxed once at construction so
	// that a call does not allocate to pass them.
	arg3, arg4 any
	quota      int           // Result.Limit: the most events admitted at once
	unit       time.Duration // of the times the script returns: ns or µs
	// retryClosed is the RetryAfter of a refusal under FailClosed.
	retryClosed time.Duration
}

// newFallbackFunc builds the in-process limiter that FailLocal decides
// with: a keylimit constructor of the same algorithm.
type newFallbackFunc func(keylimit.Limit, ...keylimit.Option) (keylimit.Limiter[string], error)

// init sets up lim, the limiter shared by the constructors, once they have
// checked l and chosen alg. It is set up in place: lim holds atomics.
func (lim *limiter) init(self any, client redis.UniversalClient, l keylimit.Limit, alg algorithm, o options, newFallback newFallbackFunc) error {
	lim.self = self
	if client == nil {
		return errors.New("redislimit: the Redis client is nil")
	}
	if err := checkClient(client); err != nil {
		return err
	}
	lim.client = client
	lim.alg = alg
	lim.limit = l
	lim.timeout = o.timeout
	lim.policy = o.policy
	lim.onError = o.onError
	lim.clock = newLocalClock(o.clock)
	lim.ops.init(o)
	lim.deny.init(o.denyCache, &lim.ops.counts)
	lim.backoff = o.backoff
	lim.name = o.name
	lim.prefix = o.keyPrefix(alg.name, l, alg.quota)
	if o.policy.kind == failLocal {
		var opts []keylimit.Option
		if o.clock != nil {
			opts = append(opts, keylimit.WithClock(o.clock))
		}
		fb, err := newFallback(o.policy.share(l), opts...)
		if err != nil {
			return fmt.Errorf("redislimit: the FailLocal fallback limiter: %w", err)
		}
		lim.fallback = fb
	}
	lim.announce(o.policySet || o.fleet > 0)
	return nil
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

// Limit returns the limit the limiter enforces across the fleet.
func (l *limiter) Limit() keylimit.Limit { return l.limit }

// Name returns the name the limiter was made with.
func (l *limiter) Name() string { return l.name }

// Prefix returns the prefix of the Redis keys the limiter writes.
func (l *limiter) Prefix() string { return l.prefix }

// Allow reports whether one event for key may happen now, and records it in
// Redis if so. Allow is shorthand for AllowN(key, 1).
func (l *limiter) Allow(key string) bool { return l.Take(key, 1).Allowed }

// AllowN reports whether n events for key may happen now, and records all n
// in Redis if so; otherwise it records nothing. AllowN is Take(key,
// n).Allowed.
func (l *limiter) AllowN(key string, n int) bool { return l.Take(key, n).Allowed }

// Take records n events for key in Redis if all n fit, else nothing, and
// reports the decision and the key's state after it. It is TakeContext with
// context.Background(), the error left to WithOnError.
func (l *limiter) Take(key string, n int) keylimit.Result {
	r, _, _ := l.AdmitContext(context.Background(), key, n)
	return r
}

// TakeContext is Take with a context: the call waits for Redis until ctx
// ends or the limiter's timeout passes, whichever is first. A ctx that has
// ended makes no call: the Result is refused and the error is ctx's.
//
// n == 0 is always allowed and records nothing (it asks Redis for the
// key's state, as Peek does). n < 0, or n above the quota, can never pass:
// the Result is refused with RetryAfter keylimit.InfDuration, answered
// without a round trip (its Remaining and ResetAfter are then 0: unknown).
// A request that the deny cache covers is refused without a round trip
// too (see WithDenyCacheSize).
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
// index, a log entry's time), or the fallback limiter's Admission when the
// failure policy admitted.
func (l *limiter) AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	r, a, err := l.admit(ctx, key, n)
	l.ops.counts.decided(r.Allowed)
	return r, a, err
}

// admit is AdmitContext, not counted in Stats.
func (l *limiter) admit(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	if n < 0 || n > l.alg.quota {
		return keylimit.Result{Limit: l.alg.quota, RetryAfter: keylimit.InfDuration}, keylimit.Admission{}, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: l.alg.quota}, keylimit.Admission{}, l.report("take", key, err)
	}
	if n == 0 {
		r, err := l.PeekContext(ctx, key)
		r.Allowed, r.RetryAfter = true, 0
		return r, keylimit.Admission{}, err
	}
	now := l.clock.now()
	if r, ok := l.deny.check(key, n, now); ok {
		return r, keylimit.Admission{}, nil
	}
	r, mark, err := l.run(ctx, modeTake, key, n, now, 0)
	if err != nil {
		return l.failed("take", key, n, err)
	}
	// now was read before the round trip, so the remembered refusal ends a
	// little before Redis's: the cache errs towards asking again.
	l.deny.record(key, n, r, now)
	if !r.Allowed {
		return r, keylimit.Admission{}, nil
	}
	return r, keylimit.Admission{N: n, Mark: mark, By: l.self}, nil
}

// Peek reports key's state now, recording nothing: Allowed tells whether
// Allow(key) would pass, RetryAfter how long until it would. It is
// PeekContext with context.Background(), the error left to WithOnError.
func (l *limiter) Peek(key string) keylimit.Result {
	r, _ := l.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek with a context, as TakeContext is Take. A key the
// deny cache covers for one event is answered without a round trip.
func (l *limiter) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	now := l.clock.now()
	if r, ok := l.deny.check(key, 1, now); ok {
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: l.alg.quota}, l.report("peek", key, err)
	}
	r, _, err := l.run(ctx, modePeek, key, 1, now, 0)
	if err != nil {
		r, _, err := l.failed("peek", key, 0, err)
		return r, err
	}
	return r, nil
}

// Reset forgets key, on Redis and in this instance's deny cache: its next
// event meets a full quota. It is ResetContext with context.Background(),
// the error left to WithOnError.
func (l *limiter) Reset(key string) { _ = l.ResetContext(context.Background(), key) }

// ResetContext is Reset with a context. It deletes the key's state in one
// DEL. It asks Redis even during the failure backoff, since a lost Reset
// would go unnoticed (a user locked out after a successful login). If Redis
// fails, the error is returned (and passed to WithOnError) and only the
// local state is forgotten.
func (l *limiter) ResetContext(ctx context.Context, key string) error {
	l.deny.forget(key)
	if l.fallback != nil {
		l.fallback.Reset(key)
	}
	now := l.clock.now()
	c, tctx, cancel := startCall(ctx, l.timeout)
	err := l.client.Del(tctx, l.prefix+key).Err()
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
// sliding log the entries still in it. It is RefundContext with
// context.Background(), the error left to WithOnError.
func (l *limiter) Refund(key string, a keylimit.Admission) {
	_ = l.RefundContext(context.Background(), key, a)
}

// RefundContext is Refund with a context, in one script call. An Admission
// the fallback limiter made (Redis was failing then) is refunded there. If
// Redis fails, the error is returned (and passed to WithOnError).
func (l *limiter) RefundContext(ctx context.Context, key string, a keylimit.Admission) error {
	if a.N <= 0 {
		return nil
	}
	if a.By != l.self {
		if r, ok := l.fallback.(keylimit.Refunder[string]); ok && a.By == l.fallback {
			r.Refund(key, a)
		}
		return nil
	}
	l.deny.forget(key)
	if _, _, err := l.run(ctx, modeRefund, key, min(a.N, l.alg.quota), l.clock.now(), a.Mark); err != nil {
		return l.report("refund", key, err)
	}
	return nil
}

// Close releases the fallback limiter, if any. It does not close the Redis
// client, which the caller owns. The limiter still answers after Close.
// It always returns nil.
func (l *limiter) Close() error {
	if c, ok := l.fallback.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// run makes one script call for key at local time now, unless Redis failed
// less than the backoff ago, and decodes its reply: the Result, and the
// mark of an admission. mark is the admission a refund gives back.
func (l *limiter) run(ctx context.Context, mode any, key string, n int, now, mark int64) (keylimit.Result, int64, error) {
	if err := l.down(now); err != nil {
		return keylimit.Result{}, 0, err
	}
	c, tctx, cancel := startCall(ctx, l.timeout)
	c.keys[0] = l.prefix + key
	c.args = [5]any{mode, n, l.alg.arg3, l.alg.arg4, mark}
	reply, err := l.alg.script.Run(tctx, l.client, c.keys[:], c.args[:]...).Text()
	c.end(cancel)
	l.called(ctx, err, now)
	if err != nil {
		return keylimit.Result{}, 0, err
	}
	r, mark, ok := parseReply(reply)
	if !ok {
		return keylimit.Result{}, 0, fmt.Errorf("redislimit: %s script replied %q, want five integers", l.alg.name, reply)
	}
	r.Limit = l.alg.quota
	r.RetryAfter *= l.alg.unit
	r.ResetAfter *= l.alg.unit
	return r, mark, nil
}

// parseReply reads a script's reply, "allowed remaining retry-after
// reset-after mark": five integers in one string, which the client reads
// with fewer allocations than an array. The times are left in the script's
// unit; mark is an admission's (0 otherwise).
func parseReply(s string) (r keylimit.Result, mark int64, ok bool) {
	var v [5]int64
	for i := range v {
		field, rest, _ := strings.Cut(s, " ")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return r, 0, false
		}
		v[i], s = n, rest
	}
	if s != "" {
		return r, 0, false
	}
	return keylimit.Result{
		Allowed: v[0] == 1,
		// A window's count can exceed its events if the limit was lowered
		// under the same prefix; Remaining never goes below 0.
		Remaining:  max(int(v[1]), 0),
		RetryAfter: time.Duration(v[2]),
		ResetAfter: time.Duration(v[3]),
	}, v[4], true
}

// The Redis limiters are keylimit limiters, and can give events back, so
// keylimit.All can combine them (with each other or with in-memory ones).
var (
	_ keylimit.ContextLimiter[string]  = (*TokenBucket)(nil)
	_ keylimit.ContextRefunder[string] = (*TokenBucket)(nil)
	_ keylimit.ContextLimiter[string]  = (*FixedWindow)(nil)
	_ keylimit.ContextRefunder[string] = (*FixedWindow)(nil)
	_ keylimit.ContextLimiter[string]  = (*SlidingWindow)(nil)
	_ keylimit.ContextRefunder[string] = (*SlidingWindow)(nil)
)
