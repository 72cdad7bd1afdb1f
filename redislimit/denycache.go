package redislimit

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/keylimit/keylimit"
	"github.com/puzpuzpuz/xsync/v3"
)

// denyCache remembers the refusals Redis gave this instance, so that a flood
// on a refused key is answered in process, without a round trip, until the
// refusal's RetryAfter has passed.
//
// It is exact in one direction only, which is the safe one: it never admits.
// A refusal of n events for key at time t with RetryAfter d means that no
// request of n or more events for key can pass before t + d, because every
// algorithm here only gains capacity with time and a request of more events
// needs at least as long. Other instances can only take more capacity, never
// give it back, except through Reset and Refund: those, made on another
// instance, are seen here only once d has passed (made on this instance,
// they clear its entry at once, and again once made, and a refusal whose
// round trip met one is not recorded: see gens).
//
// It holds no key: an entry is keyed by a seeded 64-bit hash of the key and
// checked by a second one, so it costs the same whatever the key's length,
// and memory is bounded by the number of entries (see denialBytes).
//
// In a limiter's decision path it stands in front of the failure policy
// (take, peek, reset, refund): a request it covers goes no further, a
// refusal from Redis it remembers on the way back, and what gives capacity
// back clears the key's entry on the way down. A joined limiter's cache is
// only the store of refusals: its joined call checks and records itself.
type denyCache struct {
	// next is the layer below, the failure policy around the script call;
	// nil in a joined limiter's cache.
	next *guard
	// m maps hash(key) to its latest refusal. Load takes no lock and does
	// not allocate, so a denied call costs a clock read, a hash of the key
	// and a map lookup.
	m *xsync.MapOf[uint64, denial]
	// seed and seed2 are the seeds of the two hashes of a key: m's key, and
	// the denial's check, which tells apart keys whose m hashes collide.
	// Drawn per limiter, so no one can aim for a collision.
	seed, seed2 maphash.Seed
	// max is the most keys m may hold; 0 disables the cache.
	max int
	// hits counts the refusals check answered, for Stats.
	hits *counts
	// gens counts the forgets, by stripe of keys (m's key modulo
	// denyStripes), each bumped under mu: a refusal is recorded only if
	// its stripe's count is what it was before the round trip that made it
	// (gen). Else a Refund (or Reset) made meanwhile may have given back
	// what the refusal lacked, on Redis before or after the refusal: a
	// refusal recorded after the Refund's forget would refuse the key
	// here, though free, until its RetryAfter has passed (issue 37.6).
	// Refund and Reset forget before their call and again after it. Nil
	// with the cache disabled.
	gens *[denyStripes]atomic.Uint64
	// mono, if not nil, is the local clock whose monotonic reading ends a
	// refusal too (localClock.monoNow): set when local time is injected
	// (keylimit.WithClock) and the scripts decide on Redis's time, which keeps pace
	// with the system's clock whatever the injected one does. A refusal
	// then ends on the first of the two, so one clock that stands still
	// (a test's mock) cannot keep it after Redis's has passed (issue 37.7).
	mono *localClock

	mu sync.Mutex // protects order, oldest and seq; held by record only
	// order is m's keys in the order they were recorded, as a ring of at
	// most max slots (it grows to max, then wraps at oldest). Recording a
	// key into a full cache drops the oldest record first, so memory stays
	// bounded with O(1) upkeep a record and no sweep.
	order  []slot
	oldest int    // the index in order of the oldest slot, once order is full
	seq    uint64 // the number of records so far
}

// slot is one record in denyCache.order: the hash it went in under, and its
// sequence number, so that dropping it never drops a later record of the
// same hash.
type slot struct {
	h, seq uint64
}

// denial is one remembered refusal.
type denial struct {
	check uint64 // the key's second hash: m holds another key if it differs
	seq   uint64 // the record that wrote it (see slot)
	at    int64  // local ns at which Redis refused
	until int64  // at + RetryAfter: no request of n or more passes before
	// monoUntil is the same end on mono's monotonic clock, if not 0.
	monoUntil int64
	n         int // the number of events refused
	res       keylimit.Result
	// each is a joined limiter's: each limiter's Result (so its entries
	// cost that many Results more than denialBytes).
	each []keylimit.Result
}

// denialBytes is about what one remembered key costs, whatever its length:
// a denial with its map key in the map's entry, the map's pointer to it at
// its load factor, and its slot in order.
const denialBytes = int(unsafe.Sizeof(denial{})) + 8 + 16 + int(unsafe.Sizeof(slot{}))

// init sets d up to hold at most max keys; 0 disables it. hits counts the
// refusals it answers; next is the layer below (nil: none).
func (d *denyCache) init(max int, hits *counts, next *guard) {
	d.next = next
	d.max = max
	d.hits = hits
	if max > 0 {
		d.m = xsync.NewMapOf[uint64, denial]()
		d.seed, d.seed2 = maphash.MakeSeed(), maphash.MakeSeed()
		d.gens = new([denyStripes]atomic.Uint64)
	}
}

// denyStripes is how many stripes of keys gens counts forgets in: a
// forget keeps from being recorded only the refusals of its stripe that
// met it, 1 in 64 of those in flight on other keys.
const denyStripes = 64

// gen returns the count of forgets of key's stripe, read before a round
// trip whose refusal recordEach may record; never 0, which recordEach
// takes for "record whatever".
func (d *denyCache) gen(key string) uint64 {
	if d.gens == nil {
		return 1
	}
	return d.gens[d.hash(key)%denyStripes].Load() + 1
}

// take decides n events (n >= 1) for key under k at local time now: from a
// remembered refusal if one covers it, else by the layer below, whose
// refusal it remembers.
func (d *denyCache) take(ctx context.Context, key string, n int, k *keyLimit, now int64) (keylimit.Result, keylimit.Admission, error) {
	if r, ok := d.cached(key, n, k, now); ok {
		return r, keylimit.Admission{}, nil
	}
	gen, mono := d.gen(key), d.monoNow()
	r, a, err := d.next.take(ctx, key, n, k, now)
	if err == nil {
		// now and mono were read before the round trip, so the remembered
		// refusal ends a little before Redis's: the cache errs towards
		// asking again.
		d.recordEach(key, n, r, now, mono, nil, gen)
	}
	return r, a, err
}

// peek answers Peek for key under k at local time now: from a remembered
// refusal of one event, else by the layer below.
func (d *denyCache) peek(ctx context.Context, key string, k *keyLimit, now int64) (keylimit.Result, error) {
	if r, ok := d.cached(key, 1, k, now); ok {
		return r, nil
	}
	return d.next.peek(ctx, key, k, now)
}

// reset forgets key's refusal, and resets it below, and forgets again
// what a round trip that met it may have recorded (see gens).
func (d *denyCache) reset(ctx context.Context, key string, now int64) error {
	d.forget(key)
	defer d.forget(key)
	return d.next.reset(ctx, key, now)
}

// refund forgets key's refusal, and gives back n events (at most k's
// quota) of an admission under k, marked mark, below, and forgets again
// what a round trip that met it may have recorded (see gens).
func (d *denyCache) refund(ctx context.Context, key string, n int, k *keyLimit, mark, now int64) error {
	d.forget(key)
	defer d.forget(key)
	return d.next.refund(ctx, key, min(n, k.quota), k, mark, now)
}

// cached answers a request of n events for key, under k, at local time now,
// if a refusal made under the same quota covers it.
func (d *denyCache) cached(key string, n int, k *keyLimit, now int64) (keylimit.Result, bool) {
	r, ok := d.check(key, n, now)
	if ok && r.Limit != k.quota {
		// Remembered under another limit: SetLimit, or SetKeyLimit's
		// function, has changed it since.
		d.forget(key)
		return keylimit.Result{}, false
	}
	return r, ok
}

// check answers a request of n events for key at local time now from a
// remembered refusal, if one covers it. The Result is the refusal's, moved on
// by the time that has passed: RetryAfter, RefillAfter and ResetAfter shrink
// (RefillAfter to no less than 1 ns while Remaining stays), Remaining is
// as Redis reported it (a lower bound: capacity may have come back since).
// For a request larger than the one refused, RetryAfter is a lower bound
// too: more events may take longer to fit.
func (d *denyCache) check(key string, n int, now int64) (keylimit.Result, bool) {
	return d.checkEach(key, n, now, nil)
}

// checkEach is check, and writes a joined limiter's entry's Results, each
// limiter's, moved on alike, into each, if it is not nil.
func (d *denyCache) checkEach(key string, n int, now int64, each []keylimit.Result) (keylimit.Result, bool) {
	e, ok := d.load(key, n, now)
	if !ok {
		return keylimit.Result{}, false
	}
	passed := time.Duration(now - e.at)
	for i := range min(len(each), len(e.each)) {
		each[i] = movedOn(e.each[i], passed)
	}
	r := e.res
	r.RetryAfter = time.Duration(e.until - now)
	r.ResetAfter = max(r.ResetAfter-passed, r.RetryAfter)
	if r.RefillAfter > 0 { // at most RetryAfter, as it was when recorded
		r.RefillAfter = min(max(r.RefillAfter-passed, time.Nanosecond), r.RetryAfter)
	}
	d.hits.stripe().hits.Add(1)
	return r, true
}

// load returns key's refusal, if one covers n events at local time now.
func (d *denyCache) load(key string, n int, now int64) (denial, bool) {
	if d.m == nil {
		return denial{}, false
	}
	e, ok := d.m.Load(d.hash(key))
	if !ok || now >= e.until || n < e.n || e.check != maphash.String(d.seed2, key) ||
		e.monoUntil != 0 && d.mono.monoNow() >= e.monoUntil {
		return denial{}, false
	}
	return e, true
}

// monoNow is the reading of the monotonic clock a refusal also ends on, to
// be taken before the round trip and given to record; 0 if there is none.
func (d *denyCache) monoNow() int64 {
	if d.mono == nil {
		return 0
	}
	return d.mono.monoNow()
}

// movedOn is r, reported passed ago, now.
func movedOn(r keylimit.Result, passed time.Duration) keylimit.Result {
	if r.RetryAfter > 0 {
		r.RetryAfter = max(r.RetryAfter-passed, time.Nanosecond)
	}
	r.ResetAfter = max(r.ResetAfter-passed, r.RetryAfter)
	if r.RefillAfter > 0 {
		r.RefillAfter = max(r.RefillAfter-passed, time.Nanosecond)
	}
	return r
}

// record remembers that Redis refused n events for key at local time now,
// and mono on the monotonic clock (monoNow's, read with now), with r,
// dropping the oldest record if the cache is full. The refusal lasts the
// RetryAfter Redis said, from then, on each clock. A refusal that can never
// pass (InfDuration) is answered without a round trip anyway, and is not
// recorded.
func (d *denyCache) record(key string, n int, r keylimit.Result, now, mono int64) {
	d.recordEach(key, n, r, now, mono, nil, 0)
}

// recordEach is record, for a joined limiter with each limiter's Result,
// of a refusal made by a round trip begun when key's stripe had counted
// gen (see gen): if a forget has been counted since, it records nothing.
// A gen of 0 records whatever.
func (d *denyCache) recordEach(key string, n int, r keylimit.Result, now, mono int64, each []keylimit.Result, gen uint64) {
	if d.m == nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter == keylimit.InfDuration {
		return
	}
	h, c := d.hash(key), maphash.String(d.seed2, key)
	d.mu.Lock()
	defer d.mu.Unlock()
	// Under mu, as forget's count and delete: a record is either before
	// them, and deleted, or after, and sees the count moved.
	if gen != 0 && d.gens[h%denyStripes].Load()+1 != gen {
		return
	}
	d.seq++
	s := slot{h: h, seq: d.seq}
	if len(d.order) < d.max {
		d.order = append(d.order, s)
	} else {
		old := d.order[d.oldest]
		d.m.Compute(old.h, func(cur denial, loaded bool) (denial, bool) {
			return cur, !loaded || cur.seq == old.seq
		})
		d.order[d.oldest] = s
		d.oldest = (d.oldest + 1) % d.max
	}
	e := denial{check: c, seq: s.seq, at: now, until: now + clampSpan(r.RetryAfter), n: n, res: r}
	if d.mono != nil {
		e.monoUntil = max(mono+clampSpan(r.RetryAfter), 1)
	}
	if each != nil {
		e.each = append([]keylimit.Result(nil), each...)
	}
	d.m.Store(h, e)
}

// forget drops key's refusal: Reset and Refund on this instance give
// capacity back. Its slot in order stays, and drops nothing when its turn
// comes. It counts the forget in key's stripe (see gens).
func (d *denyCache) forget(key string) {
	if d.m == nil {
		return
	}
	h := d.hash(key)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gens[h%denyStripes].Add(1)
	d.m.Delete(h)
}

// forgetBefore drops key's refusal if it was recorded at local time t or
// before: one recorded later is newer than what made t's caller forget.
func (d *denyCache) forgetBefore(key string, t int64) {
	if d.m == nil {
		return
	}
	c := maphash.String(d.seed2, key)
	d.m.Compute(d.hash(key), func(cur denial, loaded bool) (denial, bool) {
		return cur, !loaded || cur.check == c && cur.at <= t
	})
}

// clear forgets every refusal: the limits they were made under have
// changed.
func (d *denyCache) clear() {
	if d.m == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.order, d.oldest = d.order[:0], 0
	d.m.Clear()
}

// hash is key's hash in m.
func (d *denyCache) hash(key string) uint64 { return maphash.String(d.seed, key) }

// len is the number of keys remembered, expired or not.
func (d *denyCache) len() int {
	if d.m == nil {
		return 0
	}
	return d.m.Size()
}
