package redislimit

import (
	"sync/atomic"
	"time"

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
// they clear its entry at once).
type denyCache struct {
	// m maps a key to its latest refusal. Load takes no lock and does not
	// allocate, so a denied call costs a clock read and a map lookup.
	m *xsync.MapOf[string, denial]
	// max is the most keys m may hold; 0 disables the cache.
	max int
	// nextSweep is the local time (ns) before which no sweep of expired
	// entries starts; written by CAS by the caller that sweeps.
	nextSweep atomic.Int64
}

// denial is one remembered refusal.
type denial struct {
	at    int64 // local ns at which Redis refused
	until int64 // at + RetryAfter: no request of n or more passes before
	n     int   // the number of events refused
	res   keylimit.Result
	each  []keylimit.Result // a joined limiter's: each limiter's Result
}

// sweepEvery bounds how often a full cache scans itself for expired entries.
const sweepEvery = int64(time.Second)

// init sets d up to hold at most max keys; 0 disables it.
func (d *denyCache) init(max int) {
	d.max = max
	if max > 0 {
		d.m = xsync.NewMapOf[string, denial]()
	}
}

// check answers a request of n events for key at local time now from a
// remembered refusal, if one covers it. The Result is the refusal's, moved on
// by the time that has passed: RetryAfter and ResetAfter shrink, Remaining is
// as Redis reported it (a lower bound: capacity may have come back since).
// For a request larger than the one refused, RetryAfter is a lower bound
// too: more events may take longer to fit. A joined limiter's entry writes
// each limiter's Result, moved on alike, into each, if each is not nil.
func (d *denyCache) check(key string, n int, now int64, each []keylimit.Result) (keylimit.Result, bool) {
	if d.m == nil {
		return keylimit.Result{}, false
	}
	e, ok := d.m.Load(key)
	if !ok || now >= e.until || n < e.n {
		return keylimit.Result{}, false
	}
	passed := time.Duration(now - e.at)
	for i := range min(len(each), len(e.each)) {
		each[i] = movedOn(e.each[i], passed)
	}
	r := e.res
	r.RetryAfter = time.Duration(e.until - now)
	r.ResetAfter = max(r.ResetAfter-passed, r.RetryAfter)
	return r, true
}

// movedOn is r, reported passed ago, now.
func movedOn(r keylimit.Result, passed time.Duration) keylimit.Result {
	if r.RetryAfter > 0 {
		r.RetryAfter = max(r.RetryAfter-passed, time.Nanosecond)
	}
	r.ResetAfter = max(r.ResetAfter-passed, r.RetryAfter)
	return r
}

// record remembers that Redis refused n events for key at local time now
// with r (and, for a joined limiter, each limiter's Result, each). A refusal
// that can never pass (InfDuration) is answered without a round trip
// anyway, and is not recorded.
func (d *denyCache) record(key string, n int, r keylimit.Result, now int64, each []keylimit.Result) {
	if d.m == nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter == keylimit.InfDuration {
		return
	}
	if d.m.Size() >= d.max && !d.sweep(now) {
		return // full of live refusals: this key goes to Redis each time
	}
	e := denial{at: now, until: now + int64(r.RetryAfter), n: n, res: r}
	if each != nil {
		e.each = append([]keylimit.Result(nil), each...)
	}
	d.m.Store(key, e)
}

// sweep deletes the expired entries of a full cache, at most once per
// sweepEvery, and reports whether there is room afterwards.
func (d *denyCache) sweep(now int64) bool {
	next := d.nextSweep.Load()
	if now < next || !d.nextSweep.CompareAndSwap(next, now+sweepEvery) {
		return d.m.Size() < d.max
	}
	d.m.Range(func(key string, e denial) bool {
		if now >= e.until {
			d.m.Compute(key, func(cur denial, loaded bool) (denial, bool) {
				return cur, !loaded || now >= cur.until
			})
		}
		return true
	})
	return d.m.Size() < d.max
}

// forget drops key's refusal: Reset and Refund on this instance give
// capacity back.
func (d *denyCache) forget(key string) {
	if d.m != nil {
		d.m.Delete(key)
	}
}

// len is the number of keys remembered, expired or not.
func (d *denyCache) len() int {
	if d.m == nil {
		return 0
	}
	return d.m.Size()
}
