package adaptive

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
)

// Limiter is a concurrency limiter whose limits find themselves: each key
// may hold a number of slots at once that an Algorithm (AIMD or Gradient)
// moves between a floor and a ceiling from the latency of the calls it
// admitted and from the calls dropped for overload (Permit.Drop), and all
// keys together hold no more than an overall limit, which adapts the same
// way from every key's calls. Latency is measured by the limiter, on its
// clock (WithClock), from acquisition to release: Release is a success,
// Drop a call that failed from overload (timed out, refused or shed
// downstream).
//
// Fairness: a key's own limit adapts from its own calls only, so a tenant
// whose calls slow down shrinks its own limit, not the others'; and
// latency cuts a key's limit only in a window in which the key held more
// than half the overall limit, so the queue a heavy key causes does not
// shrink a light key's limit (drops cut any key's). Under the overall limit
// the rule is max-min fair: while the total held is below the overall
// limit, any key within its own limit is admitted; once the total reaches
// it, a key is admitted only while it holds less than its fair share, the
// overall limit over the keys holding slots (itself counted), rounded up,
// and one slot more while other keys hold any (for the bursts of a key
// whose demand is about its share), so the tenant that takes most is
// refused first and one that takes little still passes. Those admissions
// may take the total above the overall limit, never above twice it (and
// the ceiling); the hard bound, three times the overall limit, is Critical
// requests' alone.
//
// Priorities (Criticality, from Acquire's context; TryAcquire is Default):
// against each limit, the key's and the overall one, a Sheddable request
// is admitted only while what is held, with it, stays within three
// quarters of the limit (at least 1 slot), a Default one within the limit
// (and the fair-share rule above). A Critical request is admitted whenever
// the total, with it, stays within the hard bound, three times the overall
// limit and the ceiling at most, whatever its key's own limit. So under
// pressure sheddable work is shed first and critical work last. Stats
// counts the refusals by criticality (Stats.Shed).
//
// A key starts at the overall limit of the moment it is first seen, with
// the overall baseline latency (see AIMD and Gradient), and is
// forgotten like any idle key once it holds nothing (WithEvictionInterval,
// WithMaxKeys), its limit with it. TryAcquire and Release take no lock and,
// for a key seen before, allocate nothing; the release that completes a
// window of samples (16) moves the limit under a lock only it tries.
//
// Its Result.Limit is the key's current limit. Stats.Limit is the overall
// current limit.
type Limiter[K comparable] struct {
	keys    *shard[K, adState]
	core    *adCore   // not inline: every hold points to it, and must not hold the limiter
	evictor io.Closer // the store's; held by the limiter alone (see newShard)
}

var _ keylimit.ConcurrencyLimiter[string] = (*Limiter[string])(nil)

// adState is one key's state.
type adState struct {
	// held is the slots the key holds, or adRetired once the evictor
	// retired the state, after which nothing writes it. An acquisition
	// adds by CAS from a value it judged; a release subtracts.
	held atomic.Int64
	ctl  control // the key's own limit
}

// adRetired marks a retired state: below any count of slots.
const adRetired = -1 << 62

// adCore is what a Limiter's holds and keys share: everything but the map.
type adCore struct {
	clock          *timeSource
	alg            controller
	floor, ceiling int64
	// total is the slots held over all keys; active the keys holding at
	// least one. Each moves with the CAS on a key's held that changes it,
	// total reserved before that CAS and given back if it loses.
	total, active atomic.Int64
	all           control // the overall limit
	shed          [3]atomic.Uint64
	waiting       atomic.Int64
	// wake is closed, and replaced, by a release while an Acquire waits.
	wake     atomic.Pointer[chan struct{}]
	nextIdle *atomic.Int64
	capped   bool
}

// New returns a Limiter whose limits alg moves. It returns an error if alg
// is the zero Algorithm, its floor is below 1, its ceiling is below the
// floor or above keylimit.MaxConcurrency, or an option is invalid
// (keylimit.WithMaxHold is a Concurrency's). The overall limit starts at the floor,
// in slow start (see AIMD and Gradient).
//
// Call Close when done with it to stop its evictor at once; a limiter
// dropped without Close stops it once the garbage collector finds it
// unreachable.
func New[K comparable](alg Algorithm, opts ...keylimit.Option) (*Limiter[K], error) {
	if err := alg.check(); err != nil {
		return nil, err
	}
	core := &adCore{alg: alg.ctl, floor: int64(alg.floor), ceiling: int64(alg.ceiling)}
	core.all.init(int64(alg.floor), nil)
	ch := make(chan struct{})
	core.wake.Store(&ch)
	a := &Limiter[K]{core: core}
	keys, evictor, err := newShard(opts, stateHooks[K, adState]{
		newState: func() *adState {
			st := new(adState)
			st.ctl.init(core.all.limit.Load(), &core.all)
			return st
		},
		retireIfIdle: func(st *adState, _ int64) (bool, int64) {
			if st.held.CompareAndSwap(0, adRetired) {
				return true, 0
			}
			return false, maxTime // a key goes idle at a release, which says so (adCore.release)
		},
	})
	if err != nil {
		return nil, err
	}
	a.keys, a.evictor = keys, evictor
	core.clock, core.nextIdle, core.capped = &a.keys.clock, a.keys.nextIdle, a.keys.capped
	return a, nil
}

func init() {
	// quota asks a policy's Limiter under the request's context, for its
	// criticality, through this: no exported method for plumbing.
	compose.RegisterTryContext(func(l any) (any, bool) {
		a, ok := l.(*Limiter[string])
		if !ok {
			return nil, false
		}
		return a.tryContext, true
	})
}

// tryContext is TryAcquire at the criticality ctx carries.
func (a *Limiter[K]) tryContext(ctx context.Context, key K, n int) (keylimit.Permit, keylimit.Result) {
	return a.try(key, n, keylimit.CriticalityOf(ctx))
}

// TryAcquire acquires n of key's slots, as a Default request, if the key's
// limit and the overall limit admit them now (see Limiter for the rule),
// and reports the decision; it never waits. Release the Permit when the
// call succeeded, Drop it when it failed from overload. A refused call
// holds nothing, and its Permit is the zero Permit.
//
// The Result's Limit is the key's current limit, and Remaining the slots a
// Default request could still take now. A refusal's RetryAfter is an
// estimate: the mean latency of the key's last window of samples (the
// overall one's, or a second, before the first) scaled by the slots that
// must be released first over the limit.
//
// n == 0 is always allowed and holds nothing. n < 0, or n above the
// ceiling, can never pass: the Result is refused with RetryAfter
// InfDuration.
func (a *Limiter[K]) TryAcquire(key K, n int) (keylimit.Permit, keylimit.Result) {
	return a.try(key, n, keylimit.Default)
}

// try is TryAcquire at criticality crit, counted.
func (a *Limiter[K]) try(key K, n int, crit keylimit.Criticality) (keylimit.Permit, keylimit.Result) {
	p, r, v := a.decide(key, n, crit)
	if n != 0 {
		a.count(v, crit)
	}
	return p, r
}

// decide is TryAcquire at criticality crit, with its verdict, uncounted.
func (a *Limiter[K]) decide(key K, n int, crit keylimit.Criticality) (keylimit.Permit, keylimit.Result, verdict) {
	c := a.core
	if n <= 0 || int64(n) > c.ceiling {
		return keylimit.Permit{}, a.keys.impossible(a.Peek(key), n), never
	}
	st := a.keys.loadOrCreate(key)
	for {
		if st == nil {
			return keylimit.Permit{}, a.keys.untracked(int(c.all.limit.Load()), n), untracked
		}
		p, r, gone := c.take(st, int64(n), crit)
		if !gone {
			if !r.Allowed {
				return p, r, refused
			}
			return p, r, admitted
		}
		st = a.keys.replace(key, st)
	}
}

// count counts a request's verdict v, for Stats: a refusal is a shed of
// its criticality.
func (a *Limiter[K]) count(v verdict, crit keylimit.Criticality) {
	a.keys.admits(v)
	if v == refused {
		a.core.shed[crit].Add(1)
	}
}

// Acquire acquires n of key's slots at the criticality ctx carries
// (WithCriticality; Default if none), waiting under ctx until the limits
// admit them, and returns the Permit that holds them. A waiter tries again
// whenever a slot is released or its estimate of when one will be has
// passed; waiters are not served in order, and a TryAcquire may pass
// first: an adaptive limit is for shedding load, not queueing it.
//
// It fails at once, holding nothing, if ctx has ended, or if n can never
// pass (n < 0, or above the ceiling: ErrExceedsLimit). If ctx ends first,
// it returns ctx's error, wrapped, holding nothing. n == 0 returns the
// zero Permit at once.
func (a *Limiter[K]) Acquire(ctx context.Context, key K, n int) (keylimit.Permit, error) {
	if err := ctx.Err(); err != nil {
		return keylimit.Permit{}, fmt.Errorf("adaptive: acquire %s: %w", slots(n), err)
	}
	c := a.core
	switch {
	case n == 0:
		return keylimit.Permit{}, nil
	case n < 0 || int64(n) > c.ceiling:
		a.keys.admits(never)
		return keylimit.Permit{}, fmt.Errorf("%w: %s can never be held at once under an adaptive ceiling of %d", keylimit.ErrExceedsLimit, slots(n), c.ceiling)
	}
	crit := keylimit.CriticalityOf(ctx)
	for {
		wake := c.wake.Load() // before the try: a release after it closes this one
		p, r, v := a.decide(key, n, crit)
		if r.Allowed {
			a.count(v, crit)
			return p, nil
		}
		if err := c.wait(ctx, *wake, r.RetryAfter); err != nil {
			a.count(v, crit) // once for the request, however many tries
			return keylimit.Permit{}, fmt.Errorf("adaptive: acquire %s: %w", slots(n), err)
		}
	}
}

// wait waits until wake is closed, d has passed on the limiter's clock, or
// ctx ends (its error).
func (c *adCore) wait(ctx context.Context, wake chan struct{}, d time.Duration) error {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	t := c.clock.timers.Timer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C:
	}
	return nil
}

// Peek reports key's state now, holding nothing: Allowed says whether
// TryAcquire(key, 1) would pass, Limit is the key's current limit (the
// overall one for a key not seen), Remaining how many slots a Default
// request could take. Peek does not create the key.
func (a *Limiter[K]) Peek(key K) keylimit.Result {
	c := a.core
	st := a.keys.load(key)
	var h int64
	lk := c.all.limit.Load()
	if st != nil {
		if h = st.held.Load(); h < 0 {
			h = 0
		} else {
			lk = st.ctl.limit.Load()
		}
	}
	return c.report(st, h, c.total.Load(), 1, lk, keylimit.Default)
}

// Stats returns what the limiter has counted (see Stats and WithStats):
// with Adaptive set, Limit the overall current limit, Shed the requests
// refused, by criticality (a TryAcquire refused, an Acquire that gave up),
// and Waiting the Acquires waiting now.
func (a *Limiter[K]) Stats() keylimit.Stats {
	c := a.core
	st := a.keys.stats()
	st.Adaptive = true
	st.Limit = int(c.all.limit.Load())
	for i := range c.shed {
		st.Shed[i] = c.shed[i].Load()
	}
	st.Waiting = int(c.waiting.Load())
	return st
}

// Close stops the limiter's evictor. The limiter still answers after
// Close, exactly, but no longer forgets idle keys in the background. It
// returns nil.
func (a *Limiter[K]) Close() error {
	return a.evictor.Close()
}

// take acquires n slots of st at criticality crit if its limit and the
// overall limit admit them. gone reports a retired st (nothing decided).
func (c *adCore) take(st *adState, n int64, crit keylimit.Criticality) (p keylimit.Permit, r keylimit.Result, gone bool) {
	var bo backoff
	for {
		h := st.held.Load()
		if h < 0 {
			return keylimit.Permit{}, keylimit.Result{}, true
		}
		lk := st.ctl.limit.Load()
		if h+n > c.keyRoom(lk, crit) {
			return keylimit.Permit{}, c.report(st, h, c.total.Load(), n, lk, crit), false
		}
		t, ok := c.reserve(h, n, crit)
		if !ok {
			return keylimit.Permit{}, c.report(st, h, t, n, lk, crit), false
		}
		if st.held.CompareAndSwap(h, h+n) {
			if h == 0 {
				c.active.Add(1)
			}
			return c.permit(st, n), c.admitted(h+n, t+n, lk), false
		}
		c.total.Add(-n) // the key's CAS lost: give the reservation back, judge afresh
		bo.Wait()
	}
}

// reserve adds n to the total held, for a key holding h, at criticality
// crit, if the overall limit admits it (see Limiter): below it, or for a
// key below its fair share, to twice it and the ceiling at most. It returns
// the total before, and whether it reserved.
func (c *adCore) reserve(h, n int64, crit keylimit.Criticality) (int64, bool) {
	for {
		t := c.total.Load()
		if !c.fits(h, t, n, crit) {
			return t, false
		}
		if c.total.CompareAndSwap(t, t+n) {
			return t, true
		}
	}
}

// fits reports whether the overall limit admits n more slots at
// criticality crit for a key holding h, with t held in all: within the
// limit's room, or, for a key below its fair share of the room, within the
// share bound, twice the limit (see shareBound). A Critical request
// is admitted whenever the total stays within the hard bound (its room).
func (c *adCore) fits(h, t, n int64, crit keylimit.Criticality) bool {
	all := c.all.limit.Load()
	room := room(crit, all, c.ceiling)
	if t+n <= room {
		return true
	}
	return h+n <= c.share(room, h) && t+n <= shareBound(all, c.ceiling)
}

// share is the fair share of room of a key holding h: room over the keys
// holding slots (itself counted), rounded up, and, if another key holds
// any, one slot more, so that
// light keys beside a heavy one are not held to less than they use, nor
// refused at every burst (a limit of 4 over 4 keys gives each 2: a key
// whose demand is its equal share needs a little more at times); the hard
// bound caps the sum.
func (c *adCore) share(room, h int64) int64 {
	keys := c.active.Load()
	if h == 0 {
		keys++ // this key, which holds nothing yet
	}
	if keys <= 1 {
		return room
	}
	return (room+keys-1)/keys + 1
}

// keyRoom is how many slots a request of criticality crit may see its key
// hold, with itself, under the key's limit lk: its room under lk, but for
// a Critical request, which the key's limit does not bound (only the
// overall hard bound does): a key's limit is cut by the latency its own
// Default work makes, and its critical work must not pay for that.
func (c *adCore) keyRoom(lk int64, crit keylimit.Criticality) int64 {
	if crit == keylimit.Critical {
		return c.ceiling
	}
	return room(crit, lk, c.ceiling)
}

// shareBound is the most the fair-share admissions (Default and
// Sheddable) may take the total to under the overall limit all: twice it,
// and the ceiling at most. Between it and the hard bound, three times the
// limit, only Critical requests pass.
func shareBound(all, ceiling int64) int64 { return min(2*all, ceiling) }

// admitted is the Result of an admission that left the key holding h and
// the total at t, under the key's limit lk.
func (c *adCore) admitted(h, t, lk int64) keylimit.Result {
	free := min(lk-h, c.all.limit.Load()-t)
	return keylimit.Result{Allowed: true, Limit: int(lk), Remaining: int(max(free, 0))}
}

// report is the Result of a request of n slots, refused or asked by Peek,
// of a key holding h (st, nil if unknown) under limit lk, with t held in all.
func (c *adCore) report(st *adState, h, t, n, lk int64, crit keylimit.Criticality) keylimit.Result {
	all := c.all.limit.Load()
	free := max(min(lk-h, all-t), 0)
	r := keylimit.Result{Limit: int(lk), Remaining: int(free)}
	roomKey, roomAll := c.keyRoom(lk, crit), room(crit, all, c.ceiling)
	if h+n <= roomKey && c.fits(h, t, n, crit) {
		r.Allowed = true
		return r
	}
	need := max(h+n-roomKey, t+n-roomAll, 1)
	mean := c.all.meanNs.Load()
	if st != nil && st.ctl.meanNs.Load() > 0 {
		mean = st.ctl.meanNs.Load()
	}
	if mean == 0 {
		mean = int64(time.Second)
	}
	d := float64(mean) * float64(need) / float64(max(min(lk, all), 1))
	r.RetryAfter = time.Duration(max(min(d, float64(maxSpan)), 1))
	return r
}

// permit makes the Permit of n slots of st, acquired now: a record of the
// store's pool, whose first Release or Drop calls release (keys.go).
func (c *adCore) permit(st *adState, n int64) keylimit.Permit {
	return c.clock.Permit(unsafe.Pointer(c), unsafe.Pointer(st), n)
}

// release gives back n slots of st acquired at at, and samples the call.
func (c *adCore) release(st *adState, n, at int64, drop bool) {
	ns := max(c.clock.now()-at, 0)
	left := st.held.Add(-n)
	if left == 0 {
		c.active.Add(-1)
		if c.capped && c.nextIdle.Load() != minTime {
			c.nextIdle.Store(minTime) // a key cap's sweep may find room again
		}
	}
	total := c.total.Add(-n)
	st.ctl.sample(c, ns, drop, left+n)
	c.all.sample(c, ns, drop, total+n)
	if c.waiting.Load() > 0 {
		ch := make(chan struct{})
		close(*c.wake.Swap(&ch))
	}
}
