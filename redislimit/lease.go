package redislimit

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/puzpuzpuz/xsync/v3"
)

// Leased quotas (WithLeases): an instance takes a hot key's events from
// Redis a lease at a time, and admits them in process until the lease is
// spent or its time is up. DESIGN.md ("Leases") has the reasoning: why the
// fleet never admits more than the limit, and what leases cost.

// maxLeaseShare bounds a lease: it holds at most 1/maxLeaseShare of the
// key's quota, so a key whose quota is below it never leases.
const maxLeaseShare = 10

// maxLease is the most events a lease under k takes beyond a request's.
func maxLease(k *keyLimit) int { return k.quota / maxLeaseShare }

// leaseShare: a bucket's lease takes at most 1/leaseShare of what the
// bucket holds beyond the request (lua/bucket.lua has it from scripts.go),
// so that the fetches of a fleet on a key nearly empty each get some.
const leaseShare = 8

// minShare is the fewest events a paced lease (the share rule, DESIGN.md
// "Leases at scale") gives an instance that asks for as many: a fleet's
// scaled lease period is max(the lease time, minShare × instances ×
// interval), so that an instance of a large fleet calls Redis at most once
// for minShare events (lua/bucket.lua has it from scripts.go).
const minShare = 4

// maxPace bounds the pace of a paced lease, in lease times.
const maxPace = 1024

// refusedIdle: a key whose last fetch Redis refused, and that may lease,
// is forgotten after refusedIdle lease times without a fetch or wait, not
// leases.idle's two. An instance that asks such a key less often than
// idle (the slow instances of a skewed fleet) would otherwise come back to
// it each time as to a rare key, with a plain take that no pace holds back
// and that takes the refill before the instances the share rule paces
// (BenchmarkLeaseSim, skewed at 10,000 instances: those went 2.9 lease
// periods without an admission). Remembered, its next call is a lease
// call: counted in the key's fleet, and paced as they are.
const refusedIdle = 16

// maxWaits is how many fetches of other calls a call waits for before it is
// refused without a round trip of its own.
const maxWaits = 3

// leases are a limiter's leases, key by key, on this instance: the top of
// its decision path with WithLeases, in front of the deny cache. A request
// a live lease holds is admitted in process; the others go down to the
// deny cache, or fetch a lease through the failure policy below it.
type leases struct {
	deny  *denyCache // the layer below
	guard *guard     // the failure policy, for the calls that fetch a lease
	clock *localClock
	d     int64 // the lease time, ns, at most maxSpan
	// monoEnds: leases end on the system's monotonic clock too (see
	// grant.over), because the local clock is injected while the scripts
	// count on Redis time, which the injected clock need not follow.
	monoEnds bool
	// idle is how long a key with no lease is remembered after its last
	// fetch: long enough to tell a hot key from a rare one.
	idle int64
	m    *xsync.MapOf[string, *leaseKey]

	sweeping sync.Mutex  // held by sweepOnce, returns included: one sweep at a time
	mu       sync.Mutex  // protects the start of the sweeper, and closing
	closed   atomic.Bool // set by Close: no more leases; written under mu
	running  atomic.Bool // the sweeper runs; written under mu
	stop     chan struct{}
	wg       sync.WaitGroup // the sweeper, and the returns SetLimit starts

	// The sweeper sleeps until it has something to do (see sweep): next is
	// the local time it wakes at, monoNext the time on the monotonic clock
	// (leases with monoUntil), never if none; both are never while it
	// scans. A change that makes something due earlier sends on kick
	// (remind), which holds one wake-up.
	next, monoNext atomic.Int64
	kick           chan struct{}
	// For the tests (SweeperWakes): the times the sweeper woke, the
	// reminds sent on kick and received, and the timer it sleeps on (nil
	// while it runs).
	wakes, kicks, kicked atomic.Int64
	parked               atomic.Pointer[sweepParked]
	// For BenchmarkLeasedFleet: the leases the sweeper ended holding
	// events, which it gave back (their instance did not spend them within
	// their time).
	unspent atomic.Int64
}

// never is a sweeper's wake-up time when it has nothing to wait for.
const never = math.MaxInt64

// sweepParked is the timer the sweeper sleeps on (nil: none).
type sweepParked struct{ at <-chan time.Time }

// leaseKey is what this instance keeps of one key.
type leaseKey struct {
	// cur is the lease admissions spend: the last fetch's, or an earlier
	// one that has ended; nil before the first. Read without a lock.
	cur atomic.Pointer[grant]
	// wait, when set, says that Redis granted less than the last fetch
	// asked (or refused it): no fetch is made before wait.until, and calls
	// the lease cannot serve are refused in process. Read without a lock.
	wait atomic.Pointer[leaseWait]

	mu sync.Mutex // protects the fields below; no call a lease serves takes it
	// fetch is closed when the fetch under way ends; nil when none is.
	fetch   chan struct{}
	waiting int   // events asked by the calls waiting for that fetch
	last    int64 // local ns of the last fetch
	back    int64 // local ns when it returned: its lease could be spent from then
	// k is the limit of the last fetch; nil before the first (or after a
	// Reset), when the key is asked as a rare one.
	k       *keyLimit
	size    int64  // events the last fetch took: n, and what it leased
	asked   int64  // events the last fetch asked for: n, and what it wanted
	short   bool   // the last fetch got less than it asked for
	paced   bool   // Redis gave the last fetch a pace: the key is in a fleet's share
	refused bool   // Redis refused the last fetch
	leased  *grant // the last fetch's lease; nil if it leased nothing
	retired bool   // the sweeper has removed the key: find its entry anew
}

// grant is one lease: events taken from Redis for this instance to spend
// before until.
type grant struct {
	// The fields every admission reads, written before the lease is
	// published and never after.
	owner *leases
	k     *keyLimit // the limit it was taken under
	mark  int64     // what the script wrote: a bucket's TAT, a window's index
	at    int64     // local ns of the fetch
	until int64     // local ns from which nothing is spent: at + the lease time, or the window's end
	// monoUntil, if not 0, is the same end on the system's monotonic clock
	// (localClock.monoNow), from a reading before the call: a lease spends
	// nothing after the time Redis counted it for, whatever an injected
	// clock says (see leases.monoEnds).
	monoUntil int64
	reset     time.Duration // the ResetAfter Redis reported
	refill    time.Duration // and its RefillAfter
	// granted is the events the fetch took: the lease's, and its own
	// request's. A lease never holds more, nor gives more back to Redis.
	granted int64
	// left, which every admission writes, is on cache lines of its own (two,
	// against adjacent-line prefetch): sharing one with the fields above,
	// each admission on one core would make the next on another miss them.
	_ [128 - 64]byte
	// left is the events not yet spent: admissions take from it by CAS,
	// Refund gives back to it; ended once the lease has ended, after which
	// nothing is spent from it.
	left atomic.Int64
	_    [120]byte
	// given counts the events given back to Redis from this lease: each
	// return counts from a mark moved back by those before it (see markFor).
	given  atomic.Int64
	unused int64 // what left held when the lease ended; under the key's mu
}

// ended is a lease's left once it has ended.
const ended = -1

// leaseWait is a key's state after Redis granted less than was asked.
type leaseWait struct {
	until int64 // local ns before which no fetch is made
	k     *keyLimit
	res   keylimit.Result // Redis's Result at local time at
	at    int64
}

// newLeases returns the leases of d in front of deny, fetched through g,
// on clk; onRedisTime says that the scripts count on Redis time (always,
// outside the package's tests).
func newLeases(deny *denyCache, g *guard, clk *localClock, d time.Duration, onRedisTime bool) *leases {
	ld := clampSpan(d)
	g.store.instance = strconv.FormatUint(rand.Uint64(), 36)
	ls := &leases{deny: deny, guard: g, clock: clk, d: ld, idle: 2 * ld,
		monoEnds: onRedisTime && clk.injected != nil, m: xsync.NewMapOf[string, *leaseKey](), stop: make(chan struct{}),
		kick: make(chan struct{}, 1)}
	ls.next.Store(never)
	ls.monoNext.Store(never)
	return ls
}

// take decides n events (n >= 1) for key under k at local time now: from
// the key's lease if it holds them, without a lock; else in the slow path.
func (ls *leases) take(ctx context.Context, key string, n int, k *keyLimit, now int64) (keylimit.Result, keylimit.Admission, error) {
	if k.timed != nil {
		// A key's own limit per period of the calendar: not leased (see
		// calendar.go), decided by Redis on each call.
		return ls.deny.take(ctx, key, n, k, now)
	}
	if e, ok := ls.m.Load(key); ok {
		if p := e.cur.Load(); p != nil && p.k == k {
			if left, ok := p.take(n, now, ls.clock); ok {
				return p.result(left, now), keylimit.Admission{N: n, Mark: p.mark, By: p}, nil
			}
		}
		if w := e.wait.Load(); w != nil && w.k == k && now < w.until {
			return w.refusal(now), keylimit.Admission{}, nil
		}
	}
	if r, ok := ls.deny.cached(key, n, k, now); ok {
		return r, keylimit.Admission{}, nil
	}
	return ls.slow(ctx, key, n, k)
}

// time returns the lease time of a lease under k: the limiter's, but at
// most half a bucket's span (Burst × Interval), for a lease counts from its
// end, and one as long as the span would leave no room in the bucket.
func (ls *leases) time(k *keyLimit) int64 {
	if k.step > 0 {
		return min(ls.d, k.span/2)
	}
	return ls.d
}

// fast spends n events for key, under k, from its lease, if it holds them,
// and returns the lease, what is left and the local time: AllowN's and
// Take's path, which needs no Admission, and no context (theirs never
// ends). It takes no lock and writes nothing unless it admits.
func (ls *leases) fast(key string, n int, k *keyLimit) (*grant, int64, int64, bool) {
	if n < 1 || n > k.quota || k.err != nil {
		return nil, 0, 0, false
	}
	e, ok := ls.m.Load(key)
	if !ok {
		return nil, 0, 0, false
	}
	p := e.cur.Load()
	if p == nil || p.k != k {
		return nil, 0, 0, false
	}
	now := ls.clock.now()
	left, ok := p.take(n, now, ls.clock)
	return p, left, now, ok
}

// over reports whether p's time is up at local time now on c: by the local
// clock, or by the monotonic one (monoUntil).
func (p *grant) over(now int64, c *localClock) bool {
	return now >= p.until || p.monoUntil != 0 && c.monoNow() >= p.monoUntil
}

// take spends n events of p at local time now, if p holds them and its
// time is not up, and returns what is left.
func (p *grant) take(n int, now int64, c *localClock) (int64, bool) {
	for {
		if p.over(now, c) {
			return 0, false
		}
		v := p.left.Load()
		if v < int64(n) {
			return v, false
		}
		if p.left.CompareAndSwap(v, v-int64(n)) {
			return v - int64(n), true
		}
		// A retry after a lost CAS must not spend on a time older than the
		// lease's end.
		now = c.now()
	}
}

// result is the Result of an admission from p at local time now that left
// left: Remaining counts only the lease's events, which this instance
// surely has; others' and Redis's may be gone.
func (p *grant) result(left, now int64) keylimit.Result {
	passed := time.Duration(now - p.at)
	return keylimit.Result{Allowed: true, Limit: p.k.quota, Remaining: int(left),
		ResetAfter: max(p.reset-passed, 0), RefillAfter: max(p.refill-passed, 0)}
}

// refusal is the Result of a call refused at local time now while w holds.
func (w *leaseWait) refusal(now int64) keylimit.Result {
	retry := time.Duration(w.until - now)
	return keylimit.Result{Limit: w.k.quota, RetryAfter: retry, RefillAfter: retry,
		ResetAfter: max(w.res.ResetAfter-time.Duration(now-w.at), retry)}
}

// end ends p, so that nothing is spent from it after, and returns the
// events it still held. The caller holds the key's mu.
func (p *grant) end() int64 {
	u := p.left.Swap(ended)
	if u <= 0 {
		return 0
	}
	p.unused = u
	return u
}

// markFor counts u events of p as given back to Redis, at most what p was
// granted in all, and returns the mark to give them back from and how many
// they are: a bucket's TAT moved back by the events given before (a return
// after another must count from where the first left the TAT); a window's
// index as it is.
func (p *grant) markFor(u int64) (int64, int64) {
	for {
		before := p.given.Load()
		u := min(u, p.granted-before)
		if u <= 0 {
			return p.mark, 0
		}
		if p.given.CompareAndSwap(before, before+u) {
			return p.mark - before*p.k.step, u
		}
	}
}

// entry returns key's entry, making it if there is none.
func (ls *leases) entry(key string) *leaseKey {
	e, ok := ls.m.Load(key)
	if !ok {
		e, _ = ls.m.LoadOrCompute(key, func() *leaseKey { return new(leaseKey) })
		ls.wake()
	}
	return e
}

// slow decides n events for key under k when the key's lease cannot: one
// call fetches a lease (or, for a key that is not hot, makes a plain take),
// and the calls that come meanwhile wait for it, then spend from it.
func (ls *leases) slow(ctx context.Context, key string, n int, k *keyLimit) (keylimit.Result, keylimit.Admission, error) {
	for waits := 0; ; {
		now := ls.clock.now()
		if ls.closed.Load() {
			return ls.deny.take(ctx, key, n, k, now)
		}
		e := ls.entry(key)
		e.mu.Lock()
		if e.retired {
			e.mu.Unlock()
			continue
		}
		p := e.cur.Load()
		if p != nil && p.k == k {
			if left, ok := p.take(n, now, ls.clock); ok {
				e.mu.Unlock()
				return p.result(left, now), keylimit.Admission{N: n, Mark: p.mark, By: p}, nil
			}
		}
		if ch := e.fetch; ch != nil {
			if waits == maxWaits {
				// Other calls keep taking what each fetch brings: refused,
				// as the lease is empty, for one event's refill.
				e.mu.Unlock()
				return keylimit.Result{Limit: k.quota, RetryAfter: k.retryClosed, ResetAfter: k.retryClosed, RefillAfter: k.retryClosed}, keylimit.Admission{}, nil
			}
			e.waiting += n
			e.mu.Unlock()
			waits++
			select {
			case <-ch:
			case <-ctx.Done():
				return keylimit.Result{Limit: k.quota}, keylimit.Admission{}, ls.guard.report("take", key, ctx.Err())
			}
			continue
		}
		if w := e.wait.Load(); w != nil && w.k == k && now < w.until {
			e.mu.Unlock()
			return w.refusal(now), keylimit.Admission{}, nil
		}
		ch := make(chan struct{})
		e.fetch = ch
		want := e.want(n, k, now, ls.d)
		// A key Redis paced, or refused (one that may lease: see
		// refusedIdle), is asked in a lease call even for none beyond n:
		// counted in the key's fleet, and paced as it is.
		paced := e.k == k && (e.paced || e.refused && maxLease(k) > 0)
		e.waiting = 0
		var give int64
		if p != nil {
			give = p.end()
		}
		e.mu.Unlock()
		r, a, err := ls.fetch(ctx, key, n, k, e, want, paced, p, give, now)
		e.mu.Lock()
		e.fetch = nil
		at, mono := ls.due(e, ls.clock.now())
		e.mu.Unlock()
		close(ch)
		ls.remind(at, mono)
		return r, a, err
	}
}

// want returns how many events beyond n a fetch for the key under k at
// local time now asks for: what the key spent here in about one lease time
// d (from what its last lease lasted since the fetch returned: a round
// trip longer than d does not make a hot key look rare), at most twice the
// last fetch's take,
// at least what the calls waiting ask, at most maxLease(k). After a fetch
// that got less than it asked, it asks the same again. The caller holds
// e.mu.
func (e *leaseKey) want(n int, k *keyLimit, now, d int64) int {
	most := maxLease(k)
	if most < 1 {
		return 0
	}
	var est int64
	if e.k == k {
		var unspent int64 // what the last lease held when it ended
		if p := e.leased; p != nil {
			if u := p.left.Load(); u != ended {
				unspent = max(u, 0)
			} else {
				unspent = p.unused
			}
		}
		switch elapsed := now - e.back; {
		case e.paced && unspent > 0:
			// Paced, and its lease ran out unspent: the host runs this
			// instance later than a lease lasts. It asks for none beyond
			// n, until a lease is spent again.
			est = int64(n)
		case e.paced:
			// Redis paced the key: its calls meanwhile were refused in
			// process, so what it spent tells nothing of what it would. It
			// asks for twice its last, of which Redis gives its share. (Nor
			// does how late after the pace it asks: a host that wakes its
			// goroutines late makes an instance that asks without pause
			// look like one that asks rarely.)
			est = max(2*e.size, int64(n)+1)
		case e.short:
			est = e.asked
		case e.refused && elapsed < d:
			// Refused, and asked again within a lease time: a key a fleet
			// contends for. One more than n makes the fetch a lease, which
			// counts the instance in the key's fleet and may pace it.
			est = int64(n) + 1
		case elapsed <= 0:
			est = 2 * e.size
		default:
			est = int64(min(float64(e.size-unspent)*float64(d)/float64(elapsed), float64(2*e.size)))
		}
	}
	est = max(est, int64(n+e.waiting))
	return int(min(max(est-int64(n), 0), int64(most)))
}

// fetch takes n events for key under k at local time now, and leases up to
// want more, in one script call that also gives back the give events old,
// the key's last lease, left unused; a key that wants none is a plain take,
// unless Redis paced it (paced: it stays in the fleet's count and pace).
// It records what it got in e.
func (ls *leases) fetch(ctx context.Context, key string, n int, k *keyLimit, e *leaseKey, want int, paced bool,
	old *grant, give int64, now int64) (keylimit.Result, keylimit.Admission, error) {
	if old != nil && old.k != k {
		// Taken under another limit: given back under it, on its own.
		_ = ls.giveBack(ctx, key, old, give)
		old, give = nil, 0
	}
	if want == 0 && give == 0 && !paced {
		r, a, err := ls.deny.take(ctx, key, n, k, now)
		e.fetched(now, k, n, 0, r, 0, 0, nil, ls, err != nil)
		return r, a, err
	}
	var res [1]keylimit.Result
	var marks [1]int64
	parts := [1]*keyLimit{k}
	in := [1]int64{}
	if give > 0 {
		in[0], give = old.markFor(give)
		ls.deny.forget(key)
	}
	d := decision{key: key, n: n, parts: parts[:], marks: in[:], leasing: leaseArgs{want: want, hold: ls.time(k), give: give, period: ls.d}}
	var mono int64
	if ls.monoEnds {
		mono = ls.clock.monoNow() // before the call, as now was
	}
	gen := ls.deny.gen(key)
	if err := ls.guard.call(ctx, modeLease, &d, now, res[:], marks[:]); err != nil {
		e.fetched(now, k, n, want, keylimit.Result{Limit: k.quota}, 0, 0, nil, ls, true)
		return ls.guard.failed(ctx, "take", key, k, n, err)
	}
	r, got, pace := res[0], d.leasing.granted, d.leasing.pace
	if !r.Allowed {
		ls.deny.recordEach(key, n, r, now, mono, nil, gen) // mono is read if the cache ends on it
		e.fetched(now, k, n, want, r, 0, pace, nil, ls, false)
		return r, keylimit.Admission{}, nil
	}
	if got == 0 {
		e.fetched(now, k, n, want, r, 0, pace, nil, ls, false)
		return r, keylimit.Admission{N: n, Mark: marks[0], By: k}, nil
	}
	life := ls.time(k)
	if d.leasing.life > 0 {
		life = d.leasing.life // a paced lease, as long as the bucket's debt
	}
	if k.step == 0 {
		// A window's lease ends with its window, which ends no earlier than
		// ResetAfter after now (now was read before Redis's clock was).
		life = min(ls.d, clampSpan(r.ResetAfter))
	}
	p := &grant{owner: ls, k: k, mark: marks[0], at: now, until: now + life, reset: r.ResetAfter, refill: r.RefillAfter, granted: int64(n) + got}
	if ls.monoEnds {
		p.monoUntil = max(mono+life, 1)
	}
	p.left.Store(got)
	e.fetched(now, k, n, want, r, got, pace, p, ls, false)
	if ls.closed.Load() {
		// Close may have passed this key already: give the lease back now.
		e.mu.Lock()
		u := p.end()
		e.mu.Unlock()
		_ = ls.giveBack(context.WithoutCancel(ctx), key, p, u)
	}
	r.Remaining = int(got)
	return r, keylimit.Admission{N: n, Mark: p.mark, By: p}, nil
}

// fetched records in e a fetch made at local time now for n events under k,
// wanting want more, on ls: Redis's Result r, the events got beyond n and
// their lease p (nil if none), and the pace Redis gave (0: none). If it got
// less than it asked because Redis had too little (less than leaseShare
// times what was missing; not because a lease did not fit beside a bucket
// nearly full), no fetch is made before more could have come back: for a
// bucket, the refill of leaseShare times what was missing, at most the
// lease time d, of which half and a random part of the rest; a window's
// end. A paced fetch makes none before its pace is up (the share rule:
// lua/bucket.lua's paced). A fetch that failed (failed) sets no wait: the
// failure policy and its backoff answer.
func (e *leaseKey) fetched(now int64, k *keyLimit, n, want int, r keylimit.Result, got, pace int64, p *grant, ls *leases, failed bool) {
	d, back := ls.d, ls.clock.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last, e.back, e.k, e.leased = now, back, k, p
	e.asked, e.size = int64(n+want), 0
	if r.Allowed {
		e.size = int64(n) + got
	}
	e.short = want > 0 && e.size < e.asked && (!r.Allowed || int64(r.Remaining) < leaseShare*(e.asked-e.size))
	e.paced, e.refused = pace > 0, !r.Allowed && !failed
	if p != nil {
		e.cur.Store(p)
	}
	if (!e.short && !e.paced) || failed {
		e.wait.Store(nil)
		return
	}
	var wait int64
	if e.short {
		wait = clampSpan(r.RetryAfter)
		if k.step > 0 {
			// A random part, so that the instances a fetch left short do not
			// come back together, to an empty bucket; but back before the
			// bucket's debt (ResetAfter) falls below the lease time, for a
			// lease then counts from its end, and the refill between the
			// two is lost (no instance asked for it).
			w := min(d, leaseShare*(e.asked-e.size)*k.step, max(int64(r.ResetAfter)-ls.time(k), 0))
			wait = max(wait, w/2+rand.Int64N(w/2+1))
		} else if r.Allowed {
			wait = max(wait, clampSpan(r.ResetAfter))
		}
	}
	if !r.Allowed && pace > 0 {
		// A refusal's pace: a random part of it, from half, so that the
		// instances refused together do not come back together.
		pace = pace/2 + rand.Int64N(pace/2+1)
	}
	wait = max(wait, pace)
	e.wait.Store(&leaseWait{until: now + wait, k: k, res: r, at: now})
}

// giveBack gives u events of p, a lease that has ended, back to Redis for
// key, as a refund of p's admission: in one script call, as far as p still
// holds them there (see bucket.lua). It asks Redis as a Refund does.
func (ls *leases) giveBack(ctx context.Context, key string, p *grant, u int64) error {
	mark, u := p.markFor(u)
	if u <= 0 {
		return nil
	}
	return ls.deny.refund(ctx, key, int(min(u, int64(p.k.quota))), p.k, mark, ls.clock.now())
}

// refund gives back n events that an admission took from p: to p, while
// it lasts, so that this instance spends them again, up to what p was
// granted; once p has ended, to Redis (giveBack). (Each Admission is
// refunded once, above: the ceiling is what holds even so.)
func (ls *leases) refund(ctx context.Context, key string, p *grant, n int) error {
	now := ls.clock.now()
	for !p.over(now, ls.clock) {
		v := p.left.Load()
		if v == ended {
			break
		}
		if p.left.CompareAndSwap(v, min(v+int64(n), p.granted)) {
			if v == 0 {
				// The lease holds events again: the sweeper gives them
				// back at its end.
				ls.remind(p.until, p.monoEnd())
			}
			return nil
		}
		now = ls.clock.now()
	}
	return ls.giveBack(ctx, key, p, int64(n))
}

// peek answers a Peek of key under k at local time now from the key's
// lease or its wait, if either covers it, else by the deny cache below.
func (ls *leases) peek(ctx context.Context, key string, k *keyLimit, now int64) (keylimit.Result, error) {
	if r, ok := ls.covered(key, k, now); ok {
		return r, nil
	}
	return ls.deny.peek(ctx, key, k, now)
}

// covered answers a Peek of key under k at local time now from the key's
// lease or its wait, if either covers it.
func (ls *leases) covered(key string, k *keyLimit, now int64) (keylimit.Result, bool) {
	e, ok := ls.m.Load(key)
	if !ok {
		return keylimit.Result{}, false
	}
	if p := e.cur.Load(); p != nil && p.k == k && !p.over(now, ls.clock) {
		if left := p.left.Load(); left >= 1 {
			return p.result(left, now), true
		}
	}
	if w := e.wait.Load(); w != nil && w.k == k && now < w.until {
		return w.refusal(now), true
	}
	return keylimit.Result{}, false
}

// reset ends key's lease without giving it back, and its wait, and resets
// the key below: Reset deletes the key's state in Redis.
func (ls *leases) reset(ctx context.Context, key string, now int64) error {
	ls.forget(key)
	return ls.deny.reset(ctx, key, now)
}

// forget ends key's lease without giving it back, and its wait.
func (ls *leases) forget(key string) {
	if e, ok := ls.m.Load(key); ok {
		e.mu.Lock()
		if p := e.cur.Load(); p != nil {
			p.end()
		}
		e.wait.Store(nil)
		e.k, e.leased = nil, nil
		at, mono := ls.due(e, ls.clock.now())
		e.mu.Unlock()
		ls.remind(at, mono)
	}
}

// held is one lease ended with events to give back.
type held struct {
	key string
	p   *grant
	u   int64
}

// endAll ends every lease, and every wait, and returns what they held.
func (ls *leases) endAll() []held {
	var hs []held
	ls.m.Range(func(key string, e *leaseKey) bool {
		e.mu.Lock()
		if p := e.cur.Load(); p != nil {
			if u := p.end(); u > 0 {
				hs = append(hs, held{key, p, u})
			}
		}
		e.wait.Store(nil)
		e.mu.Unlock()
		return true
	})
	return hs
}

// limitChanged ends every lease, so that none taken under an old limit
// admits under the new one, and gives back what they held in the
// background (under the old limits: see bucket.lua).
func (ls *leases) limitChanged() {
	hs := ls.endAll()
	ls.remind(math.MinInt64, never) // the waits ended: keys may retire sooner
	if len(hs) == 0 {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed.Load() {
		return // Close gives back nothing it did not end itself: these are lost, as in a crash
	}
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		for _, h := range hs {
			_ = ls.giveBack(context.Background(), h.key, h.p, h.u)
		}
	}()
}

// close stops the sweeper, ends every lease and gives back what they held,
// each in a call of its own. Decisions after it make no lease.
func (ls *leases) close() {
	ls.mu.Lock()
	if ls.closed.Load() {
		ls.mu.Unlock()
		return
	}
	ls.closed.Store(true)
	close(ls.stop)
	ls.mu.Unlock()
	ls.wg.Wait()
	for _, h := range ls.endAll() {
		_ = ls.giveBack(context.Background(), h.key, h.p, h.u)
	}
}

// wake starts the sweeper unless it runs: a key has been added.
func (ls *leases) wake() {
	if ls.running.Load() {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed.Load() || ls.running.Load() {
		return
	}
	ls.running.Store(true)
	ls.wg.Add(1)
	go ls.sweep()
}

// sweep is the sweeper: it sleeps until something is due (see due), on the
// local clock, and on the monotonic one for a lease's monoUntil, then
// sweeps (scan), until Close, or until no key is left (a key added later
// starts it again), so that a limiter whose keys are idle leaves no
// goroutine behind. It does not tick: while no lease holding events is
// live it wakes only to forget a key, or when remind says that something
// is due sooner than it sleeps for (a new lease, a refund to a spent one).
// A lease's events are given back once its end is due on either clock,
// as late as the goroutine runs after its timer.
func (ls *leases) sweep() {
	defer ls.wg.Done()
	select {
	case <-ls.kick: // a wake-up for the sweeper before: this scan sees what it was for
		ls.kicked.Add(1)
	default:
	}
	for {
		ls.next.Store(never)
		ls.monoNext.Store(never)
		at, mono := ls.scan()
		ls.next.Store(at)
		ls.monoNext.Store(mono)
		if ls.m.Size() == 0 {
			ls.mu.Lock()
			ls.running.Store(false)
			ls.mu.Unlock()
			// A key added meanwhile may have seen running still set, and
			// not started a sweeper: this one goes on for it.
			if ls.m.Size() == 0 || !ls.resume() {
				return
			}
			continue
		}
		if !ls.sleep(at, mono) {
			return
		}
	}
}

// sleep waits until local time at, or monotonic time mono, or a remind,
// and reports false if the limiter was closed meanwhile.
func (ls *leases) sleep(at, mono int64) bool {
	var local, sys <-chan time.Time
	if at != never {
		d := at - ls.clock.now()
		if d <= 0 {
			return true
		}
		c, stop := ls.clock.timer(time.Duration(d))
		defer stop()
		local = c
	}
	if mono != never {
		d := mono - ls.clock.monoNow()
		if d <= 0 {
			return true
		}
		t := time.NewTimer(time.Duration(d))
		defer t.Stop()
		sys = t.C
	}
	ls.parked.Store(&sweepParked{at: local})
	defer ls.parked.Store(nil)
	select {
	case <-ls.stop:
		return false
	case <-ls.kick:
		ls.wakes.Add(1)
		ls.kicked.Add(1)
		return true
	case <-local:
	case <-sys:
	}
	ls.wakes.Add(1)
	return true
}

// remind wakes the sweeper if it sleeps past local time at or monotonic
// time mono: something is due then. The caller has made the change first,
// so that a scan under way either sees it or is followed by another
// (next is never while it scans).
func (ls *leases) remind(at, mono int64) {
	if at < ls.next.Load() || mono < ls.monoNext.Load() {
		ls.kicks.Add(1) // before the send: the tests must not see it received and not sent
		select {
		case ls.kick <- struct{}{}:
		default:
			ls.kicks.Add(-1)
		}
	}
}

// due returns when the sweeper next has something to do for e, at local
// time now, on the local clock and on the monotonic one (never for none):
// end e's lease, if it is live and holds events to give back; forget the
// key, once it has had no lease, wait or fetch for idleOf(e) (a lease that
// holds nothing is ended then). The caller holds e.mu.
func (ls *leases) due(e *leaseKey, now int64) (at, mono int64) {
	at, mono = never, never
	if e.fetch != nil {
		// The fetch's end reminds the sweeper (slow) if it is due sooner;
		// until then the key is due as it was, if later than now (a scan
		// during a fetch does not make every fetch a wake-up).
		if r := e.quiet() + ls.idleOf(e); r > now {
			at = r
		}
		return at, mono
	}
	p := e.cur.Load()
	live := p != nil && p.left.Load() != ended
	if live && p.left.Load() > 0 {
		at, mono = p.until, p.monoEnd()
	}
	r := e.quiet() + ls.idleOf(e)
	if live {
		r = max(r, p.until)
	}
	return min(at, r), mono
}

// idleOf is how long after quiet e's key is forgotten: ls.idle, or
// refusedIdle lease times for a key whose last fetch Redis refused and
// that may lease. The caller holds e.mu.
func (ls *leases) idleOf(e *leaseKey) int64 {
	if e.refused && e.k != nil && maxLease(e.k) > 0 {
		return max(ls.idle, min(ls.d, maxSpan/refusedIdle)*refusedIdle)
	}
	return ls.idle
}

// quiet is the local time from which e has had no fetch, nor wait: its
// last fetch's, or the end of its wait, if later. A key is forgotten
// ls.idle after it, so that one the share rule paces for longer than idle
// is not forgotten as its pace ends, to be asked as a rare key again. The
// caller holds e.mu.
func (e *leaseKey) quiet() int64 {
	q := e.last
	if w := e.wait.Load(); w != nil {
		q = max(q, w.until)
	}
	return q
}

// monoEnd is p's end on the monotonic clock, never if it has none.
func (p *grant) monoEnd() int64 {
	if p.monoUntil == 0 {
		return never
	}
	return p.monoUntil
}

// resume marks the sweeper running again, unless another has started or
// the limiter is closed.
func (ls *leases) resume() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed.Load() || ls.running.Load() {
		return false
	}
	ls.running.Store(true)
	return true
}

// sweepOnce ends the leases whose time is up and gives back what they held,
// and forgets the keys that have had no lease, wait or fetch for idleOf.
func (ls *leases) sweepOnce() { ls.scan() }

// scan is sweepOnce, and returns when it next has something to do (due),
// over the keys left: on the local clock and on the monotonic one, never
// for none.
func (ls *leases) scan() (at, mono int64) {
	ls.sweeping.Lock()
	defer ls.sweeping.Unlock()
	at, mono = never, never
	now := ls.clock.now()
	var hs []held
	ls.m.Range(func(key string, e *leaseKey) bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.fetch == nil {
			u, p, retired := ls.sweepKey(key, e, now)
			if u > 0 {
				hs = append(hs, held{key, p, u})
			}
			if retired {
				return true
			}
		}
		a, m := ls.due(e, now)
		at, mono = min(at, a), min(mono, m)
		return true
	})
	ls.unspent.Add(int64(len(hs)))
	for _, h := range hs {
		_ = ls.giveBack(context.Background(), h.key, h.p, h.u)
	}
	return at, mono
}

// sweepKey ends e's lease if its time is up at local time now, and returns
// what it held, and forgets key if it has had no lease, wait or fetch for
// idleOf(e) (see quiet). The caller holds e.mu, and no fetch is under way.
func (ls *leases) sweepKey(key string, e *leaseKey, now int64) (int64, *grant, bool) {
	var u int64
	p := e.cur.Load()
	if p != nil && p.over(now, ls.clock) {
		u = p.end()
	}
	if (p == nil || p.left.Load() == ended) && now-e.quiet() >= ls.idleOf(e) {
		e.retired = true
		ls.m.Compute(key, func(cur *leaseKey, loaded bool) (*leaseKey, bool) { return cur, !loaded || cur == e })
		return u, p, true
	}
	return u, p, false
}
