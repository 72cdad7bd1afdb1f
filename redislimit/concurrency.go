package redislimit

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// Concurrency limits each key to N slots held at once across a fleet: the
// Redis counterpart of keylimit.Concurrency, a keylimit.ConcurrencyLimiter
// that passes the same suite (keylimit/limitertest). TryAcquire takes n
// slots if the fleet leaves room, Acquire waits for them under a context,
// and the Permit either returns gives them back, once.
//
// Each acquisition is a hold in Redis, recorded with an expiry on Redis
// time: one script call acquires (it first drops the key's expired holds),
// one releases; a release of a hold that expired, or of another's, frees
// nothing. While its Permit is held, this instance renews the hold every
// half expiry (WithHoldExpiry, DefaultHoldExpiry), in the background, so a
// long holder keeps its slots; keylimit.WithMaxHold ends the renewals of a hold
// that old, so a holder that never releases (a lost goroutine) cannot wedge
// its key.
//
// What holds across the fleet, each instance with its own N (SetLimit
// changes this instance's):
//   - While every instance is live and reaches Redis, no more than N slots
//     of a key are held at once: every hold is counted in Redis before its
//     Permit is returned.
//   - An instance that dies (a crash, kill -9, a lost host) stops renewing:
//     its slots come back to the fleet within the hold expiry of its death.
//   - An instance paused (a stop-the-world, SIGSTOP, a VM migration), or cut
//     off from Redis, for longer than half the expiry may find its holds
//     expired when it resumes: others may have taken their slots meanwhile,
//     and the key then runs above N until the resumed holders release. The
//     limiter cannot stop work already running; the renewal that finds a
//     hold gone logs it (Warn), and the hold's Release frees nothing.
//
// Acquire is first come, first served on each instance: waiters of a key
// queue here, the oldest asks Redis, and none is overtaken by a later
// Acquire or TryAcquire of this instance. Across instances, the oldest
// waiter of each instance holds a ticket in the key's queue in Redis, in
// the order they first asked, and only the first ticket's waiter acquires
// (TryAcquire passes only while no one waits): so instances are served in
// turn, and a waiter that is first on its instance is overtaken by at most
// one waiter of each other instance (one that asked before it). The first
// asks again at once after a release of the key on its own instance or a
// SetLimit, and otherwise polls: from 2 ms, doubling, up to (ahead + 1)
// eighths of the mean hold the instance has seen (ahead: the tickets
// before its own; 2 to 25 ms), so a slot freed on another instance stays
// free about an eighth of a hold, and a waiter far back asks less often.
// A ticket whose
// waiter stops asking (its instance died, or was paused) leaves the queue
// a second after its last ask; one that gives up (its context ended)
// leaves it at once.
//
// A release whose call fails (Redis out of reach, or within the failure
// backoff) is tried again at each renewal until Redis answers, so its
// slots come back about one renewal period after Redis does, not at the
// hold expiry; so is the clean-up of an acquisition whose reply was lost.
// At most 1024 such releases wait per limiter: past that, the oldest is
// left to its hold expiry, and the next renewal logs it (Warn).
//
// While Redis fails, the failure policy answers (WithFailurePolicy):
// FailOpen admits, with a Permit that holds nothing; FailClosed refuses;
// FailLocal(k) acquires from an in-memory keylimit.Concurrency of N/k slots
// (at least 1), whose Permits are its own. Holds taken in process are not
// in Redis: once Redis answers again, a key may run above N until they are
// released.
//
// Every method is safe for concurrent use. Call Close when done: it stops
// the renewals (holds still out then expire within the expiry), and tries
// the waiting releases once more.
type Concurrency struct {
	name  string
	store store
	clock localClock
	ops   ops
	// guard reports errors and keeps the failure backoff; its fallback is
	// unused (fallback below is).
	guard guard
	// fallback is FailLocal's in-process limiter, of N/k slots; nil under
	// the other policies.
	fallback *keylimit.Concurrency[string]
	// limit is N on this instance; setMu serializes SetLimit.
	limit atomic.Int64
	setMu sync.Mutex
	// expiry and maxHold are WithHoldExpiry's and keylimit.WithMaxHold's, in µs for
	// the script (boxed once); maxHoldNs is 0 without a longest hold.
	expiry, maxHold any
	expiryNs        int64
	maxHoldNs       int64
	// id is this instance's part of every hold id, 16 random hex digits;
	// seq numbers its holds.
	id  string
	seq atomic.Uint64
	// holdNs is a moving average of the hold times this instance saw
	// released, in ns, for RetryAfter's estimate; 0 before the first.
	holdNs    atomic.Int64
	reclaimed atomic.Uint64
	waiting   atomic.Int64

	mu     sync.Mutex             // protects queues, holds, pending, dropped and closed
	queues map[string]*concQueue  // the keys with an Acquire waiting here
	holds  map[*concHold]struct{} // the live holds this instance renews
	// pending is the releases whose call failed, oldest first, at most
	// concPendingMax: the renewer retries them (retryReleases). dropped
	// counts those the cap pushed out since it was last logged. closed is
	// set by Close: a release that fails after it is left to the expiry.
	pending []concPending
	dropped int
	closed  bool

	stop    chan struct{} // closed by Close; the renewer then returns
	renewed chan struct{} // closed when the renewer has returned
	// endRenewal cancels the renewer's calls, the one in flight too, so
	// that Close does not wait a timeout for each live hold.
	endRenewal context.CancelFunc
	closeOnce  sync.Once
}

var (
	//go:embed lua/concurrency.lua
	concurrencyLua string

	concScript = redis.NewScript(concurrencyLua)
)

// The modes the concurrency script takes, boxed once.
var (
	modeAcquire any = "acquire"
	modeRelease any = "release"
	modeRenew   any = "renew"
	modePeekC   any = "peek"
	modeDequeue any = "leave"
)

// concReply is the script's reply.
type concReply struct {
	ok        bool
	held      int64
	next      time.Duration // until the first hold of the key expires
	reclaimed int64
	// ahead is the waiters before a refused waiter's ticket in the fleet's
	// queue; -1 if the reply does not say (no ticket, or served).
	ahead int64
}

// NewConcurrency returns a Concurrency that lets each key hold at most n
// slots at once across every instance that shares its Redis keys, named
// for its purpose as the rate limiters are. Its keys are prefix{key} and
// prefix{key}:n (the holds), prefix{key}:q and prefix{key}:qx (the queue
// of waiters across the fleet), and prefix#fleet (the live fleet, see
// WithFleetSize), the prefix "keylimit:" + name + ":concurrency:" unless
// WithPrefix says otherwise: not the limit, so instances that disagree on
// N (a rolling deploy) share their holds.
//
// It returns an error if n is below 1 or above keylimit.MaxConcurrency
// (keylimit's, as keylimit.NewConcurrency would), or if an option is
// invalid or does not apply (WithLeases). There is no deny
// cache (WithDenyCacheSize is ignored): a key's holds change at every
// release, anywhere in the fleet. WithFleetSize(k) makes the failure
// policy FailLocal(k), as for the rate limiters.
func NewConcurrency(client redis.UniversalClient, name string, n int, opts ...Option) (*Concurrency, error) {
	o, err := buildOptions(name, opts)
	if err != nil {
		return nil, err
	}
	if o.leaseTime > 0 {
		return nil, errors.New("redislimit: WithLeases is the rate limiters': a Concurrency takes no leases")
	}
	if client == nil {
		return nil, errors.New("redislimit: the Redis client is nil")
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	// The fallback checks n, in keylimit's words; it serves only FailLocal.
	var kopts []keylimit.Option
	if o.clock != nil {
		kopts = append(kopts, keylimit.WithClock(o.clock))
	}
	if o.maxHold > 0 {
		kopts = append(kopts, keylimit.WithMaxHold(o.maxHold))
	}
	fb, err := keylimit.NewConcurrency[string](n, kopts...)
	if err != nil {
		return nil, err
	}
	if o.policy.local() {
		_ = fb.SetLimit(concShare(o.policy.instances, n))
	} else {
		fb.Close()
		fb = nil
	}
	expiry := o.holdExpiry
	if expiry == 0 {
		expiry = DefaultHoldExpiry
	}
	if o.maxHold > 0 {
		expiry = min(expiry, o.maxHold)
	}
	prefix := "keylimit:" + o.name + ":concurrency:"
	if o.prefix != nil {
		prefix = *o.prefix
	}
	var id [8]byte
	_, _ = crand.Read(id[:]) // never fails (crypto/rand's promise since Go 1.24)
	c := &Concurrency{
		name:     o.name,
		fallback: fb,
		expiry:   int64(expiry / time.Microsecond), maxHold: int64(o.maxHold / time.Microsecond),
		expiryNs: int64(expiry), maxHoldNs: int64(o.maxHold),
		id:     hex.EncodeToString(id[:]),
		queues: map[string]*concQueue{},
		holds:  map[*concHold]struct{}{},
		stop:   make(chan struct{}), renewed: make(chan struct{}),
	}
	c.limit.Store(int64(n))
	c.clock.init(o.clock)
	c.ops.init(o.name, client, o.timeout, o.logger, o.fleet, o.policy, nil)
	c.ops.describe = c.admits
	c.store = store{client: client, prefix: prefix, timeout: o.timeout, clock: o.scriptClock}
	c.guard = guard{store: &c.store, ops: &c.ops, policy: o.policy, backoff: o.backoff, onError: o.onError, clock: &c.clock}
	if o.beats {
		c.guard.fleet = newFleet(client, prefix, o.timeout, o.scriptClock, c.fleetChanged)
	}
	c.ops.log().Debug("redislimit: concurrency limiter", "limiter", o.name, "prefix", prefix, "limit", n,
		"hold_expiry", expiry, "max_hold", o.maxHold, "policy", o.policy.String(), "admits", c.admits())
	renewal, end := context.WithCancel(context.Background())
	c.endRenewal = end
	go c.renew(renewal, expiry/2)
	return c, nil
}

// concShare is FailLocal's share of n slots among k instances: n/k, at
// least 1.
func concShare(k, n int) int { return max(n/max(k, 1), 1) }

// admits says what the failure policy admits while Redis fails.
func (c *Concurrency) admits() string {
	return c.guard.policy.admitsSlots(int(c.limit.Load()), c.guard.instances())
}

// fleetChanged gives the fallback its share of N among k instances, the
// live fleet's size just learned.
func (c *Concurrency) fleetChanged(k int) {
	c.setMu.Lock()
	defer c.setMu.Unlock()
	if c.fallback != nil {
		_ = c.fallback.SetLimit(concShare(k, int(c.limit.Load())))
	}
}

// StateKey returns the Redis key of key's holds (a sorted set); their slots
// are in StateKey(key) + ":n" (a hash), and the fleet's waiters of key in
// StateKey(key) + ":q" and ":qx" (sorted sets of tickets, by arrival and by
// expiry). See the rate limiters' StateKey for
// keys that are empty or hold a '}'.
func (c *Concurrency) StateKey(key string) string { return c.store.redisKey(key) }

// SetLimit makes n the slots each key may hold at once, on this instance
// (each instance sends its own with every acquisition: set it on each). It
// returns an error, and changes nothing, if n is below 1 or above
// keylimit.MaxConcurrency.
//
// Holds stay held, even above a lowered n: no acquisition then succeeds
// until enough are released to leave room under n. The waiters of this
// instance ask again at once, and those that ask for more than n fail with
// keylimit.ErrExceedsLimit.
func (c *Concurrency) SetLimit(n int) error {
	if n < 1 || n > keylimit.MaxConcurrency {
		// keylimit's words for an invalid limit.
		_, err := keylimit.NewConcurrency[string](n)
		return err
	}
	c.setMu.Lock()
	defer c.setMu.Unlock()
	c.limit.Store(int64(n))
	if c.fallback != nil {
		_ = c.fallback.SetLimit(concShare(c.guard.instances(), n))
	}
	c.mu.Lock()
	for _, q := range c.queues {
		for _, w := range q.waiters {
			signal(w.wake)
		}
	}
	c.mu.Unlock()
	return nil
}

// signal sends one wake-up on ch without blocking: one pending is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// TryAcquire acquires n of key's slots if the fleet's holds leave room for
// them under this instance's limit and no Acquire of key waits, on this
// instance or another, in one script call, and reports the decision and the key after
// it; it never waits. Release the Permit when done: its Release is one
// script call. A refused call holds nothing, and its Permit is the zero
// Permit. It is TryAcquireContext with context.Background(), the error left
// to WithOnError.
//
// The Result's Limit is N and Remaining the slots still free across the
// fleet (0 while a waiter is queued here; a waiter on another instance
// refuses the call with slots free, which it is owed). A refusal's RetryAfter is an
// estimate, not a promise: the mean hold time this instance has seen
// released (of any key; before the first, a second or the time until the
// key's first hold expires, whichever is less), scaled by the slots that
// must be released first over N. n == 0 is always allowed and holds
// nothing; n < 0, or n above N, can never pass: refused with RetryAfter
// keylimit.InfDuration, without a round trip.
func (c *Concurrency) TryAcquire(key string, n int) (keylimit.Permit, keylimit.Result) {
	p, r, _ := c.TryAcquireContext(context.Background(), key, n)
	return p, r
}

// TryAcquireContext is TryAcquire with a context, for the call's deadline
// and values, as TakeContext is Take's. If Redis fails, the Result (and the
// Permit) are the failure policy's, and err, a *Error, says why.
func (c *Concurrency) TryAcquireContext(ctx context.Context, key string, n int) (keylimit.Permit, keylimit.Result, error) {
	limit := c.limit.Load()
	switch {
	case n == 0:
		r, err := c.PeekContext(ctx, key)
		r.Allowed, r.RetryAfter = true, 0
		return keylimit.Permit{}, r, err
	case n < 0 || int64(n) > limit:
		c.ops.counts.decided(false)
		return keylimit.Permit{}, keylimit.Result{Limit: int(limit), RetryAfter: keylimit.InfDuration}, nil
	case c.queued(key):
		c.ops.counts.decided(false)
		return keylimit.Permit{}, keylimit.Result{Limit: int(limit), RetryAfter: c.estimate(int64(n), limit, 0)}, nil
	}
	if err := ctx.Err(); err != nil {
		c.ops.counts.decided(false)
		return keylimit.Permit{}, keylimit.Result{Limit: int(limit)}, c.guard.report("acquire", key, err)
	}
	p, r, err := c.try(ctx, key, n, limit)
	c.ops.counts.decided(r.Allowed)
	return p, r, err
}

// try asks Redis for n slots of key under limit, once; if the call fails,
// the failure policy answers.
func (c *Concurrency) try(ctx context.Context, key string, n int, limit int64) (keylimit.Permit, keylimit.Result, error) {
	p, r, _, err := c.tryQueued(ctx, key, n, limit, "")
	return p, r, err
}

// tryQueued is try for a waiter holding ticket in the key's queue in Redis
// ("": none), which passes only once the ticket is first in it; ahead is
// the tickets before it after a refusal by Redis, -1 if unknown.
func (c *Concurrency) tryQueued(ctx context.Context, key string, n int, limit int64, ticket string) (_ keylimit.Permit,
	_ keylimit.Result, ahead int64, _ error) {
	h := &concHold{key: key, id: c.id + "." + strconv.FormatUint(c.seq.Add(1), 10), at: c.clock.now()}
	// The call does not end with ctx, only with the limiter's timeout: a
	// call abandoned in flight may still run on Redis after a release sent
	// on another connection of the pool, and so hold slots nobody holds.
	// A caller whose ctx ends meanwhile waits for the reply, then gives
	// back what it took, in order.
	rep, err := c.callQueued(context.WithoutCancel(ctx), modeAcquire, key, h.id, n, limit, ticket)
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			// The limiter's timeout, or the connection, lost the reply: the
			// script may have run, or may run still.
			c.cleanUp(key, h.id)
		}
		p, r, err := c.failed(ctx, key, n, limit, err)
		return p, r, -1, err
	}
	if !rep.ok {
		return keylimit.Permit{}, c.refusal(rep, int64(n), limit), rep.ahead, nil
	}
	if err := ctx.Err(); err != nil {
		if _, rerr := c.call(context.Background(), modeRelease, key, h.id, 1, 1); rerr != nil {
			c.queueRelease(key, h.id, false)
		}
		p, r, err := c.failed(ctx, key, n, limit, err)
		return p, r, -1, err
	}
	c.mu.Lock()
	c.holds[h] = struct{}{}
	c.mu.Unlock()
	return keylimit.NewPermit(func() { c.release(h) }),
		keylimit.Result{Allowed: true, Limit: int(limit), Remaining: int(max(limit-rep.held, 0))}, -1, nil
}

// refusal is the Result of a refused acquisition of n under limit.
func (c *Concurrency) refusal(rep concReply, n, limit int64) keylimit.Result {
	return keylimit.Result{Limit: int(limit), Remaining: int(max(limit-rep.held, 0)),
		RetryAfter: c.estimate(rep.held+n-limit, limit, rep.next)}
}

// estimate is RetryAfter's estimate for a key on which need more slots must
// be released, under limit, whose first hold expires in next (0: unknown).
func (c *Concurrency) estimate(need, limit int64, next time.Duration) time.Duration {
	avg := time.Duration(c.holdNs.Load())
	if avg == 0 {
		avg = time.Second
		if next > 0 {
			avg = min(avg, next)
		}
	}
	return max(time.Duration(float64(avg)*float64(max(need, 1))/float64(limit)), time.Millisecond)
}

// failed answers an acquisition of n slots of key under limit by the
// failure policy after err, as the rate limiters' guard does; but a caller
// whose ctx ended (cancelled, or its deadline passed: an Acquire that gives
// up) gets a refusal and no policy. The limiter's own timeout
// (WithTimeout) is Redis failing, and the policy answers.
func (c *Concurrency) failed(ctx context.Context, key string, n int, limit int64, err error) (keylimit.Permit, keylimit.Result, error) {
	if ctx.Err() != nil {
		return keylimit.Permit{}, keylimit.Result{Limit: int(limit)}, c.guard.report("acquire", key, fmt.Errorf("%w (the call: %w)", ctx.Err(), err))
	}
	retry := max(c.guard.backoff, time.Millisecond)
	if errors.Is(err, ErrScript) {
		// Refused whatever the policy, as the rate limiters' guard does.
		err = c.guard.report("acquire", key, err)
		return keylimit.Permit{}, keylimit.Result{Limit: int(limit), RetryAfter: retry, Err: err}, err
	}
	c.ops.counts.stripe().fallbacks.Add(1)
	err = c.guard.report("acquire", key, err)
	if r, ok := c.guard.policy.decide(int(limit), n, retry, false); ok {
		return keylimit.Permit{}, r, err
	}
	p, r := c.fallback.TryAcquire(key, n)
	if r.RetryAfter == keylimit.InfDuration {
		// n is above the share, not above N: it can pass once Redis is back.
		r.RetryAfter = retry
	}
	return p, r, err
}

// exceeds is the error of an acquisition of n slots that can never pass.
func (c *Concurrency) exceeds(n int) error {
	return fmt.Errorf("%w: %s can never be held at once under a concurrency limit of %d (redislimit)",
		keylimit.ErrExceedsLimit, concSlots(n), c.limit.Load())
}

// concSlots formats a count of slots: "1 slot", "3 slots".
func concSlots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return strconv.Itoa(n) + " slots"
}

// Peek reports key's state now, holding nothing: Allowed says whether
// TryAcquire(key, 1) would pass, Remaining how many slots are free across
// the fleet (0 while a waiter is queued here), a refusal's RetryAfter is
// TryAcquire's estimate. It is PeekContext with context.Background().
func (c *Concurrency) Peek(key string) keylimit.Result {
	r, _ := c.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek with a context. It is one script call (which drops
// the key's expired holds, as every call does), but while a waiter is
// queued here, when it answers in process. If Redis fails, err says why,
// and the Result is the failure policy's for one slot (FailLocal: the
// fallback's Peek).
func (c *Concurrency) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	limit := c.limit.Load()
	if c.queued(key) {
		return keylimit.Result{Limit: int(limit), RetryAfter: c.estimate(1, limit, 0)}, nil
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: int(limit)}, c.guard.report("peek", key, err)
	}
	rep, err := c.call(ctx, modePeekC, key, "", 1, limit)
	if err != nil {
		err = c.guard.report("peek", key, err)
		if r, ok := c.guard.policy.decide(int(limit), 0, max(c.guard.backoff, time.Millisecond), false); ok {
			return r, err
		}
		return c.fallback.Peek(key), err
	}
	if !rep.ok {
		return c.refusal(rep, 1, limit), nil
	}
	return keylimit.Result{Allowed: true, Limit: int(limit), Remaining: int(max(limit-rep.held, 0))}, nil
}

// call makes one script call in mode for key's hold id, of n slots under
// limit, unless Redis failed less than the backoff ago, and tells the
// observers how it went; the slots of the expired holds it dropped are
// counted as reclaimed.
func (c *Concurrency) call(ctx context.Context, mode any, key, id string, n int, limit int64) (concReply, error) {
	return c.callQueued(ctx, mode, key, id, n, limit, "")
}

// callQueued is call for a waiter holding ticket in the key's queue in
// Redis ("": none).
func (c *Concurrency) callQueued(ctx context.Context, mode any, key, id string, n int, limit int64, ticket string) (concReply, error) {
	now := c.clock.now()
	if err := c.guard.down(now); err != nil {
		return concReply{}, err
	}
	return c.runQueued(ctx, now, mode, key, id, n, limit, ticket)
}

// run is call at local time now, even within the failure backoff.
func (c *Concurrency) run(ctx context.Context, now int64, mode any, key, id string, n int, limit int64) (concReply, error) {
	return c.runQueued(ctx, now, mode, key, id, n, limit, "")
}

// runQueued is run for a waiter holding ticket ("": none).
func (c *Concurrency) runQueued(ctx context.Context, now int64, mode any, key, id string, n int, limit int64, ticket string) (concReply, error) {
	rk := c.store.redisKey(key)
	var t any = noTicket
	if ticket != "" {
		t = ticket
	}
	args := []any{mode, id, n, limit, c.expiry, c.maxHold, t, concTicketTTLµs}
	if c.store.clock != nil {
		t := c.store.clock.c.Now()
		args = append(args, t.Unix(), t.Nanosecond())
	}
	cl, tctx, cancel := startCall(ctx, c.store.timeout)
	// The other three keys in one string (one allocation), cut in three.
	more, l := rk+":n"+rk+":q"+rk+":qx", len(rk)
	keys := []string{rk, more[:l+2], more[l+2 : 2*l+4], more[2*l+4:]}
	text, err := concScript.Run(tctx, c.store.client, keys, args...).Text()
	cl.end(cancel)
	err = scriptFailure(err)
	var rep concReply
	if err == nil {
		var ok bool
		if rep, ok = parseConcReply(text); !ok {
			err = fmt.Errorf("redislimit: the concurrency script replied %q, want four integers", text)
		}
	}
	c.guard.observe(ctx, err, now)
	if err != nil {
		return concReply{}, err
	}
	if rep.reclaimed > 0 {
		c.reclaimed.Add(uint64(rep.reclaimed))
	}
	return rep, nil
}

// parseConcReply reads the script's reply, "ok held next_µs reclaimed",
// or a refused waiter's "0 held next_µs reclaimed ahead", and reports
// whether it was well formed: ok 0 or 1, the others not negative.
func parseConcReply(s string) (concReply, bool) {
	v := [5]int64{4: -1}
	for i := range v {
		if i == 4 && s == "" {
			break
		}
		field, rest, _ := strings.Cut(s, " ")
		x, err := strconv.ParseInt(field, 10, 64)
		if err != nil || x < 0 {
			return concReply{}, false
		}
		v[i], s = x, rest
	}
	if s != "" || v[0] > 1 || (v[4] >= 0 && v[0] != 0) {
		return concReply{}, false
	}
	return concReply{ok: v[0] == 1, held: v[1], next: duration(v[2], time.Microsecond), reclaimed: v[3], ahead: v[4]}, true
}

// Stats returns what the limiter has counted: Admitted and Refused count
// acquisitions (TryAcquire, and each Acquire once, as it returns); Calls,
// Errors and ScriptErrors the script calls (renewals and releases too), as
// for the rate limiters; Fallbacks the
// acquisitions the failure policy answered; Reclaimed the slots of expired
// holds (of any instance) that this instance's calls dropped (a key whose
// holds have all expired is deleted by Redis a minute later, and what it
// held is counted by no one if no call came meanwhile); Waiting the
// Acquires waiting on this instance now; Limit this instance's N (the
// limit it was made with, or the last SetLimit set).
func (c *Concurrency) Stats() keylimit.Stats {
	st := c.ops.counts.stats()
	st.Reclaimed = c.reclaimed.Load()
	st.Waiting = int(c.waiting.Load())
	st.Limit = int(c.limit.Load())
	return st
}

// Ping checks, once at start-up say, that the limiter can work, as the rate
// limiters' Ping does, and that Redis takes the concurrency script.
func (c *Concurrency) Ping(ctx context.Context) error {
	if err := c.ops.ping(ctx); err != nil {
		return err
	}
	if err := concScript.Load(ctx, c.store.client).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: loading the concurrency script: %w", c.name, err)
	}
	return nil
}

// Close stops the renewals, tries once more the releases that failed (for
// at most a second), withdraws the instance from the live fleet under the
// default failure policy (see WithFleetSize), waits for a check of the
// server under way (as Keyed.Close does), and releases the FailLocal
// fallback. Holds still out
// are no longer renewed: they expire within the hold expiry, unless
// released first (a Release after Close still gives back, but is not
// retried if it fails). It does not close the Redis client, and returns
// nil.
func (c *Concurrency) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.endRenewal()
		<-c.renewed
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), concDrainTimeout)
		c.retryReleases(ctx, nil)
		cancel()
		c.mu.Lock()
		c.dropped += len(c.pending)
		c.pending = nil
		c.mu.Unlock()
		c.logDropped()
		c.guard.close() // the background check of the server, the fleet
		if c.fallback != nil {
			c.fallback.Close()
		}

	})
	return nil
}

var _ keylimit.ConcurrencyLimiter[string] = (*Concurrency)(nil)
