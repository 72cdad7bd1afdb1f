package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/perkey"
	"github.com/redis/go-redis/v9"
)

// Keyed is what the three Redis rate limiters share: every method but
// their constructors. TokenBucket, FixedWindow
// and SlidingWindow embed it; a Keyed is made by their constructors only,
// and its zero value is not usable. Its methods are keylimit.Keyed's, each
// deciding on Redis, and the context variants of keylimit.ContextLimiter,
// with Ping and StateKey about the Redis it runs on.
//
// Inside, a decision goes down layers, one concern each, from the top:
//
//	leases     lease.go      WithLeases: a live lease admits in process
//	denyCache  denycache.go  a refusal remembered answers in process
//	guard      guard.go      the failure policy around the call: backoff, fallback, errors
//	store      scripts.go    the script call
//	ops        log.go, health.go, stats.go: counts, outages, the checks of the server
//
// Each layer uses only those below it, and all tell ops what happened,
// which changes no decision. wire builds them, from the bottom up. A
// joined limiter (join.go) has a deny cache of its own, then goes down its
// limiters' guards.
type Keyed struct {
	name string // the constructor's: the limiter's purpose, in logs and the default prefix
	// limits are which limit each key is under: the limiter's own, or
	// SetKeyLimit's; SetLimit and SetKeyLimit begin a new generation.
	limits perkey.Limits[string, keylimit.Limit, *keyLimit]
	setMu  sync.Mutex // serializes SetLimit and SetKeyLimit, and what they change below
	// keyFn is SetKeyLimit's function (nil: none), under setMu: the
	// fallback's shares of it follow the live fleet's size (fleetChanged).
	keyFn func(string) keylimit.Limit
	// chosen: WithFailurePolicy or WithFleetSize was given (see
	// ops.announce).
	chosen bool
	// burstless: a window's limiter, which ignores Limit.Burst (set once, by init).
	burstless bool
	clock     localClock

	// The decision path, from the top: first is leases, or without them
	// the deny cache.
	first  stage
	leases *leases // nil without WithLeases
	deny   denyCache
	guard  guard
	store  store
	ops    ops
}

// A stage is a layer of the decision path that takes requests from the
// limiter: it answers them or passes them down. The deny cache is one,
// and leases, in front of it, another.
type stage interface {
	// take decides n >= 1 events for key under k at local time now.
	take(ctx context.Context, key string, n int, k *keyLimit, now int64) (keylimit.Result, keylimit.Admission, error)
	// peek reports key's state under k at local time now, taking nothing.
	peek(ctx context.Context, key string, k *keyLimit, now int64) (keylimit.Result, error)
	// reset forgets key at local time now, in the stage and below it, down
	// to Redis.
	reset(ctx context.Context, key string, now int64) error
}

// init sets up lim, the limiter shared by the constructors, for alg and l,
// with newFallback for FailLocal. It is set up in place: lim holds
// atomics.
func (lim *Keyed) init(client redis.UniversalClient, name string, l keylimit.Limit, alg *algorithm, opts []Option,
	newFallback newFallbackFunc) error {
	alg = alg.under(l)
	lim.burstless = !alg.refills
	if alg.timed == nil { // a limit per period of the calendar: alg.params checks it
		if err := l.Validate(); err != nil {
			return err
		}
	}
	_, _, quota, err := alg.params(l)
	if err != nil {
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
	if o.holdExpiry > 0 || o.maxHold > 0 {
		return errors.New("redislimit: WithHoldExpiry and WithMaxHold are for a concurrency limit: a rate limiter holds nothing")
	}
	if o.leaseTime > 0 && alg.timed != nil {
		return errors.New("redislimit: WithLeases does not apply to a calendar window")
	}
	if o.leaseTime > 0 && !alg.canLease {
		return fmt.Errorf("redislimit: WithLeases does not apply to a %s window: its log holds each admission's "+
			"time, and an event leased at one time and spent later would leave the window too early", alg.name)
	}
	return lim.wire(client, l, alg, quota, o, newFallback)
}

// wire builds lim's decision path for client, l (whose quota under alg is
// quota) and o, from the bottom up: each layer is given only what is below
// it.
func (lim *Keyed) wire(client redis.UniversalClient, l keylimit.Limit, alg *algorithm, quota int, o options,
	newFallback newFallbackFunc) error {
	lim.name = o.name
	lim.clock.init(o.clock)
	err := lim.limits.Init(l, nil, func(l keylimit.Limit) (*keyLimit, error) {
		k := newKeyLimit(&lim.store, alg, l)
		return k, k.err
	})
	if err != nil {
		return err
	}
	// What operators see, which every layer tells what happened.
	lim.ops.init(o.name, client, o.timeout, o.logger, o.fleet, o.policy, lim.limits.Limit)
	lim.ops.take = alg.take
	// The script call.
	lim.store = store{client: client, prefix: o.keyPrefix(alg.name, l, quota), timeout: o.timeout, clock: o.scriptClock,
		local: &lim.clock}
	lim.store.takes.setClient(client, o.timeout)
	// The failure policy around it.
	fb, err := fallbackFor(o.policy, l, o.clock, newFallback)
	if err != nil {
		return err
	}
	lim.guard = guard{store: &lim.store, ops: &lim.ops, policy: o.policy, backoff: o.backoff, onError: o.onError, fallback: fb,
		clock: &lim.clock}
	if o.beats {
		lim.guard.fleet = newFleet(client, lim.store.prefix, o.timeout, o.scriptClock, lim.fleetChanged)
	}
	// The deny cache in front of that, and leases in front of the deny cache.
	lim.deny.init(o.denySize, &lim.ops.counts, &lim.guard)
	if o.clock != nil && o.scriptClock == nil {
		lim.deny.mono = &lim.clock
	}
	lim.first = &lim.deny
	if o.leaseTime > 0 {
		lim.leases = newLeases(&lim.deny, &lim.guard, &lim.clock, o.leaseTime, o.scriptClock == nil)
		lim.first = lim.leases
	}
	lim.chosen = o.policySet || o.fleet > 0
	lim.ops.announce(announceReady, lim.store.prefix, lim.chosen)
	return nil
}

// fleetChanged gives the fallback its share of the limits among n
// instances, the live fleet's size just learned.
func (lim *Keyed) fleetChanged(int) {
	lim.setMu.Lock()
	defer lim.setMu.Unlock()
	lim.guard.limitChanged(lim.limits.Limit())
	if lim.keyFn != nil {
		lim.guard.keyLimitChanged(lim.keyFn)
	}
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

// StateKey returns the Redis key that holds key's state: prefix{key}, the
// prefix WithPrefix's or the default (see WithPrefix), the key as the hash
// tag; or, for a key the tag cannot hold (empty, or with a '}', which would
// end the tag early), prefix{h}:key, h a 16-hex-digit hash of the key that
// every instance computes alike. So on Redis Cluster no key can empty or choose the tag,
// and the states of one key under several limiters always share a slot.
func (l *Keyed) StateKey(key string) string { return l.store.redisKey(key) }

// Allow reports whether one event for key may happen now, and records it in
// Redis if so. Allow is shorthand for AllowN(key, 1). It returns false if
// the script failed on the server (ErrScript: see Take's Result.Err).
func (l *Keyed) Allow(key string) bool { return l.Take(key, 1).Allowed }

// AllowN reports whether n events for key may happen now, and records all n
// in Redis if so; otherwise it records nothing. AllowN is Take(key,
// n).Allowed.
func (l *Keyed) AllowN(key string, n int) bool {
	if l.leases != nil {
		if _, _, _, ok := l.leases.fast(key, n, l.limits.Resolve(key)); ok {
			l.ops.counts.decided(true)
			return true
		}
	}
	return l.Take(key, n).Allowed
}

// Take records n events for key in Redis if all n fit, else nothing, and
// reports the decision and the key's state after it. It is TakeContext with
// context.Background(), the error left to WithOnError.
func (l *Keyed) Take(key string, n int) keylimit.Result {
	if l.leases != nil {
		if p, left, now, ok := l.leases.fast(key, n, l.limits.Resolve(key)); ok {
			l.ops.counts.decided(true)
			return p.result(left, now)
		}
	}
	r, _, _ := l.admit(context.Background(), key, n)
	l.ops.counts.decided(r.Allowed)
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
// says why; the error went to the WithOnError callback as well. If the
// script failed on the server (ErrScript), no policy answers: the Result is
// refused, with err in its Err too.
func (l *Keyed) TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error) {
	r, _, err := l.admit(ctx, key, n)
	l.ops.counts.decided(r.Allowed)
	return r, err
}

// Admit is Take, and also returns what an admission took, for Refund.
func (l *Keyed) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r, a, _ := l.AdmitContext(context.Background(), key, n)
	return r, a
}

// AdmitContext is TakeContext, and also returns what an admission took, for
// RefundContext: N, and as its Mark the mark the script wrote (a bucket's
// TAT, a window's index, a log entry's time); its By holds the rest (the
// limit the key was under, the lease it was spent from, or the fallback
// limiter's Admission when the failure policy admitted), bound to key.
// Unlike Take, an Admit that admits allocates, once: the Admission is one
// however often it is copied, so that a second Refund of it gives nothing.
func (l *Keyed) AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	r, a, err := l.admit(ctx, key, n)
	l.ops.counts.decided(r.Allowed)
	if a.N > 0 {
		a = keylimit.Admission{N: a.N, Mark: a.Mark, By: &admission{lim: l, key: key, inner: a}}
	}
	return r, a, err
}

// admission is the By of an Admission a Redis limiter gives its caller:
// the one the layers below made (inner: its By a *keyLimit, a *grant or the
// fallback limiter), bound to the limiter and the key it was made for, and
// refunded at most once (issue 24.3, 24.4). Refund reads inner, never the
// caller's copy of N and Mark.
type admission struct {
	lim   *Keyed
	key   string
	inner keylimit.Admission
	done  atomic.Bool // set by the Refund that gives it back
}

// admit is AdmitContext, not counted in Stats: what needs no layer is
// answered here, the rest goes down the decision path.
func (l *Keyed) admit(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	k := l.limits.Resolve(key)
	if r, ok := k.never(n); ok {
		return r, keylimit.Admission{}, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: k.quota}, keylimit.Admission{}, l.guard.report("take", key, err)
	}
	if n == 0 {
		r, err := l.first.peek(ctx, key, k, l.clock.now())
		r.Allowed, r.RetryAfter = true, 0
		return r, keylimit.Admission{}, err
	}
	return l.first.take(ctx, key, n, k, l.clock.now())
}

// Peek reports key's state now, recording nothing: Allowed tells whether
// Allow(key) would pass, RetryAfter how long until it would. It is
// PeekContext with context.Background(), the error left to WithOnError.
func (l *Keyed) Peek(key string) keylimit.Result {
	r, _ := l.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek with a context, as TakeContext is Take. A key the
// deny cache covers for one event is answered without a round trip, and so
// is one whose lease holds an event (WithLeases).
func (l *Keyed) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	k := l.limits.Resolve(key)
	if k.err != nil {
		r, _ := k.never(1)
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: k.quota}, l.guard.report("peek", key, err)
	}
	return l.first.peek(ctx, key, k, l.clock.now())
}

// Reset forgets key, on Redis and in this instance's deny cache: its next
// event meets a full quota. It deletes the key's state in one DEL, within
// the limiter's timeout, and asks Redis even during the failure backoff,
// since a lost Reset would go unnoticed (a user locked out after a
// successful login). If Redis fails, only the local state is forgotten,
// and the error goes to WithOnError (and Stats.Errors).
func (l *Keyed) Reset(key string) { _ = l.first.reset(context.Background(), key, l.clock.now()) }

// Refund gives back what a, an Admission this limiter made for key, still
// holds, in Redis, as keylimit.Refunder says: a bucket the tokens that have
// not refilled, a fixed window the events of a window that has not ended, a
// sliding log the entries still in it. After a change of the key's limit
// to one of another interval (a bucket) or period (a fixed window), it
// gives back nothing. An Admission a lease made (WithLeases) goes back to
// the lease while it lasts, without a round trip; a lease never holds more
// than it was granted. An Admission is refunded once: a second Refund of it
// (or of a copy) gives nothing, and so does a Refund under another key than
// the one it was made for, or by another limiter. It is RefundContext with
// context.Background(), the error left to WithOnError.
func (l *Keyed) Refund(key string, a keylimit.Admission) {
	_ = l.RefundContext(context.Background(), key, a)
}

// RefundContext is Refund with a context, in one script call. A ctx that
// has ended gives nothing back and makes no call, and the Admission may be
// refunded again. An Admission the fallback limiter made (Redis was failing
// then) is refunded there. If Redis fails, the error is returned (and passed
// to WithOnError), and the Admission counts as refunded: the call may have
// given it back.
func (l *Keyed) RefundContext(ctx context.Context, key string, a keylimit.Admission) error {
	by, ok := a.By.(*admission)
	if !ok || by.lim != l || by.key != key {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return l.guard.report("refund", key, err)
	}
	if !by.done.CompareAndSwap(false, true) {
		return nil
	}
	inner := by.inner
	if a.N < inner.N { // a partial refund (see keylimit.Refunder); never more than admitted
		inner.N = max(a.N, 0)
	}
	return l.refund(ctx, key, inner)
}

// refund gives back a, an Admission the decision path made for key: to its
// lease, to Redis, or to the fallback.
func (l *Keyed) refund(ctx context.Context, key string, a keylimit.Admission) error {
	if a.N <= 0 {
		return nil
	}
	switch by := a.By.(type) {
	case *grant:
		if by.owner == nil || by.owner != l.leases {
			return nil
		}
		return l.leases.refund(ctx, key, by, a.N)
	case *keyLimit:
		if by.owner != &l.store {
			return nil
		}
		return l.deny.refund(ctx, key, a.N, by, a.Mark, l.clock.now())
	}
	l.guard.refundFallback(key, a)
	return nil
}

// Close releases the fallback limiter, if any, and with WithLeases gives
// back to Redis what the leases hold (a call per leased key) and stops
// leasing. Under the default failure policy it stops announcing the
// instance, and withdraws it from the fleet (one call), so the others no
// longer count it (see WithFleetSize). It does not close the Redis client,
// which the caller owns. The check of the server Ping makes, which the
// first call Redis answers starts in the background, is waited for if it
// is under way: at most the limiter's timeout, within 1 to 5 s. The
// limiter still answers after Close, without leases, its fallback's share
// as it was. It always returns nil.
func (l *Keyed) Close() error {
	if l.leases != nil {
		l.leases.close()
	}
	return l.guard.close()
}

// Limit returns the limiter's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by SetKeyLimit are not under it.
func (l *Keyed) Limit() keylimit.Limit { return l.report(l.limits.Limit()) }

// LimitOf returns the limit key is under now: its own, from SetKeyLimit, or
// the limiter's. httplimit reads it for each key's RateLimit-Policy.
func (l *Keyed) LimitOf(key string) keylimit.Limit { return l.report(l.limits.Resolve(key).limit) }

// report is lim as the limiter reports it: a window's without a Burst,
// which it ignores, as keylimit's windows report theirs.
func (l *Keyed) report(lim keylimit.Limit) keylimit.Limit {
	if l.burstless {
		return keylimit.Limit{Events: lim.Events, Period: lim.Period, Calendar: lim.Calendar, Location: lim.Location}
	}
	return lim
}

// SetLimit makes l the limiter's limit on this instance from its next
// decision on, and has SetKeyLimit's function asked anew. It returns an
// error, and changes nothing, if l is invalid (the constructor's errors).
//
// A key keeps what it used, as in memory: a bucket its debt in tokens, a
// fixed window the count of a window that has not ended, a sliding window
// its log. So a change never creates capacity; the bounds keylimit's types
// keep however often the limit changes hold here too. Instances share the
// keys' state, not their limits: set the limit on each. With WithLeases,
// every lease ends at once (none admits under the old limit), and what
// they held goes back to Redis in the background.
func (lim *Keyed) SetLimit(l keylimit.Limit) error {
	return lim.change(func() error { return lim.limits.Set(l) }, func() { lim.guard.limitChanged(l) })
}

// SetKeyLimit gives each key its own limit from now on: fn(key), asked on
// each decision (Redis keeps the keys' state, this instance no key), so fn
// must be quick and safe for concurrent use; a zero Limit{} from fn means
// the limiter's own, and nil puts every key under it again. Call it right
// after the constructor for per-key limits from the first request, the
// FailLocal fallback's shares included. A key keeps what it used, as
// across SetLimit; with WithLeases, every lease ends at once. If fn gives
// a key an invalid Limit, its requests are refused without a round trip
// and their Result.Err says why. It is keylimit's SetKeyLimit for the
// Redis limiters (the same fn serves both), and like SetLimit it changes
// this instance only: set it on each.
func (l *Keyed) SetKeyLimit(fn func(key string) keylimit.Limit) error {
	return l.change(func() error { return l.limits.SetKeyLimit(fn) }, func() {
		l.keyFn = fn
		l.guard.keyLimitChanged(fn)
		if l.ops.perKey.Swap(fn != nil) != (fn != nil) {
			// The line logged at construction named the limits the keys were under.
			l.ops.announce(announceKeyLimits, l.store.prefix, l.chosen)
		}
	})
}

// The messages of ops.announce: at construction, and when SetKeyLimit
// changes whether the keys are under limits of their own.
const (
	announceReady     = "redislimit: limiter ready; while Redis fails, its failure policy decides"
	announceKeyLimits = "redislimit: key limits set; while Redis fails, its failure policy decides"
)

// change begins a generation of limits with set and, if it succeeds, tells
// the fallback with follow, and forgets what was decided under the old
// limits: refusals remembered may no longer hold, and leases end.
func (l *Keyed) change(set func() error, follow func()) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if err := set(); err != nil {
		return err
	}
	follow()
	l.store.limitChanged()
	l.deny.clear()
	if l.leases != nil {
		l.leases.limitChanged()
	}
	return nil
}

// Stats returns what the limiter has counted since it was made: Admitted and
// Refused count requests (Allow, AllowN, Take, Admit, each try of Wait),
// always; Calls the round trips to Redis of decisions, leases (fetched and
// given back), Peeks, Refunds and Resets (not Ping's, nor the eviction
// check's; takes sent together in one pipeline count one each), Errors
// those that failed and ScriptErrors those whose script failed (ErrScript,
// which Errors does not count); Fallbacks the requests and Peeks
// the failure policy answered (during a failure and the backoff after it);
// CacheHits those the deny cache answered. Keys is 0: the keys live in
// Redis, which the limiter does not count (Untracked and Evicted are 0
// too). Counts read while calls run may or may not include them.
func (l *Keyed) Stats() keylimit.Stats { return l.ops.counts.stats() }

// Ping checks, once at start-up say, that the limiter can work: Redis
// answers (PING), takes its script (SCRIPT LOAD, on every node of a
// cluster), will not evict its keys and keeps them on disk. It returns an
// error wrapping ErrEvictionPolicy if a server's maxmemory is set with a
// maxmemory-policy other than noeviction (every volatile-* and allkeys-*
// policy can evict the limiter's keys, which all have a TTL), and
// ErrNoPersistence if a server keeps nothing on disk (save "" and appendonly
// no: a restart resets every quota); one error wrapping both if both. A
// server that refuses CONFIG GET (a managed Redis may) is not held against
// it. Ping waits as long as ctx allows; it changes no state and is not in
// Stats.
func (l *Keyed) Ping(ctx context.Context) error { return l.ops.ping(ctx) }

// Wait blocks until one event for key may happen, records it and returns
// nil. Wait is shorthand for WaitN(ctx, key, 1).
func (l *Keyed) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen across the fleet, and
// records them: keylimit.WaitN, with each ask a TakeContext under ctx. It
// does not reserve: it asks, and if refused sleeps for RetryAfter (on the
// local clock, keylimit.WithClock) and asks again, so a wait that fails has taken
// nothing; under contention from other instances it may be refused again
// after a sleep, and sleeps again.
//
// It fails at once, taking nothing, if n can never pass
// (keylimit.ErrExceedsLimit), or if the wait would outlast ctx's deadline
// (keylimit.ErrWouldExceedDeadline, which matches context.DeadlineExceeded
// too). It returns ctx's error, wrapped, if ctx ends first. While Redis
// fails, the failure policy answers, as for Take.
func (l *Keyed) WaitN(ctx context.Context, key string, n int) error {
	return keylimit.WaitN[string](ctx, contextTaker{l, ctx}, key, n)
}

// contextTaker is the limiter's Take under one context, for keylimit.WaitN.
type contextTaker struct {
	l   *Keyed
	ctx context.Context
}

// Clock is the limiter's local clock (keylimit.WithClock), which the wait sleeps on;
// nil is the system clock.
func (t contextTaker) Clock() clock.Clock { return t.l.clock.injected }

func (t contextTaker) Take(key string, n int) keylimit.Result {
	r, _ := t.l.TakeContext(t.ctx, key, n)
	return r
}
