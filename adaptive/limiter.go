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
// admitted and from the calls dropped for overload (keylimit.Permit.Drop), and all
// keys together hold no more than an overall limit, which adapts the same
// way from every key's calls. Latency is measured by the limiter, on its
// clock (keylimit.WithClock), from acquisition to release: Release is a success,
// Drop a call that failed from overload (timed out, refused or shed
// downstream).
//
// Fairness: a key's own limit adapts from its own calls only, so a tenant
// whose calls slow down shrinks its own limit, not the others'; and
// latency cuts a key's limit only in a window in which the key held more
// than half the overall limit, so the queue a heavy key causes does not
// shrink a light key's limit (drops cut any key's). Under the overall limit
// the rule is max-min fair, and a slot a key has just released is kept for
// it while it may come back for it. The keys counted are those holding
// slots and those that released one within the last window's mean latency
// (among the last 16 keys to release one): a key whose next call comes
// within about a latency of its last needs its slot again. A key's fair
// share is the overall limit over them (itself counted): rounded down for
// a key pressing for more than it gets (refused at least as often as it
// released, over its last window of samples), rounded up and one slot more
// for any other while there are others (for the bursts of a key whose
// demand is about its share). A request is admitted, within its key's
// limit:
//   - while the total held, with it, stays within the overall limit less
//     the slots kept for the other counted keys: for each, what it held at
//     most in its last window, up to its share, less what it holds now.
//     At most half the limit is kept, so below half of it any key passes;
//   - or, for a key within its fair share, while the total stays within
//     the burst bound: the limit for a pressed key; for another, a quarter
//     more, or one slot more for each counted key not pressed if that is
//     more (up to half the limit; one slot at least; the ceiling at most).
//
// So the tenant that takes most is refused first, cannot take the slot a
// light tenant released a moment ago and is about to ask for again, and
// the light tenants pass; the total stays near the limit, so its queue,
// and the latency of what is admitted, stay short. The hard bound, three
// times the overall limit, is Critical requests' alone.
//
// Priorities (keylimit.Criticality, from Acquire's context; TryAcquire is Default):
// against each limit, the key's and the overall one, a Sheddable request
// is admitted only while what is held, with it, stays within three
// quarters of the limit (at least 1 slot), a Default one within the limit
// (the rule above, with three quarters of the limit in the place of the
// limit for a Sheddable one). A Critical request is admitted whenever
// the total, with it, stays within the hard bound, three times the overall
// limit and the ceiling at most, whatever its key's own limit and share.
// So under pressure sheddable work is shed first and critical work last.
// Stats counts the refusals by criticality (keylimit.Stats.Shed).
//
// A key starts at the overall limit of the moment it is first seen, with
// the overall baseline latency (see AIMD and Gradient), and is
// forgotten like any idle key once it holds nothing (keylimit.WithEvictionInterval,
// keylimit.WithMaxKeys), its limit with it. TryAcquire and Release take no lock and,
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
	// last is when the key last released a slot, on the limiter's clock;
	// slot is where adCore.recent last took it, plus one (0: never, -1:
	// being put there).
	last atomic.Int64
	slot atomic.Int32
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
	// recent is the last keys to release a slot, for the shares kept for
	// keys recently active (see Limiter); recentNext is where the next
	// one goes.
	recent     [recentKeys]atomic.Pointer[adState]
	recentNext atomic.Uint32
}

// recentKeys is how many recently active keys a Limiter keeps shares for.
const recentKeys = 16

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
			st.ctl.refused.Add(1)
			return keylimit.Permit{}, c.report(st, h, c.total.Load(), n, lk, crit), false
		}
		t, ok := c.reserve(st, h, n, crit)
		if !ok {
			st.ctl.refused.Add(1)
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

// reserve adds n to the total held, for key st holding h, at criticality
// crit, if the overall limit admits it (see fits). It returns the total
// before, and whether it reserved.
func (c *adCore) reserve(st *adState, h, n int64, crit keylimit.Criticality) (int64, bool) {
	for {
		t := c.total.Load()
		if !c.fits(st, h, t, n, crit) {
			return t, false
		}
		if c.total.CompareAndSwap(t, t+n) {
			return t, true
		}
	}
}

// fits reports whether the overall limit admits n more slots at
// criticality crit for key st (nil: one not seen) holding h, with t held
// in all (see Limiter): a Critical request within the hard bound (its
// room); another within its room, less the slots kept for the other
// recently active keys (while the total stays within half the room none
// are: what is kept is at most half the limit); or, for a key within its
// fair share, within the burst bound.
func (c *adCore) fits(st *adState, h, t, n int64, crit keylimit.Criticality) bool {
	all := c.all.limit.Load()
	room := room(crit, all, c.ceiling)
	if t+n <= room/2 || crit == keylimit.Critical && t+n <= room {
		return true
	}
	if crit == keylimit.Critical {
		return false
	}
	share, kept, pressed, light := c.shares(st, h, all)
	if t+n+kept <= room {
		return true
	}
	if pressed {
		return h+n <= share && t+n <= room
	}
	return h+n <= share && t+n <= burstBound(room, light, c.ceiling)
}

// shares returns the fair share, under the overall limit all, of key st
// (nil: one not seen) holding h, and the slots kept for the other recently
// active keys. The keys counted are those holding slots and those among
// the last recentKeys to release one that did so within the last window's
// mean latency (a key whose next call comes within about one latency of
// its last needs its slot back). The fair share is all over them (st
// counted): rounded down for a pressed key (see control.pressed); rounded
// up, and one slot more while there are others, for another: a key whose
// demand is about its share needs a little more at times, and the key
// pressing for more than it gets does not. Kept for each other recent key is what it held
// at most in its last window (control.lastPeak), up to its own share,
// less what it holds; all kept are at most half of all. pressed is st's,
// and light the keys counted (st too) that are not pressed.
func (c *adCore) shares(st *adState, h, all int64) (share, kept int64, pressed bool, light int64) {
	var held, claim [recentKeys]int64
	var plus [recentKeys]bool
	others, resting := int64(0), int64(0)
	now := c.clock.now()
	within := c.all.meanNs.Load()
	for i := range c.recent {
		o := c.recent[i].Load()
		if o == nil || o == st {
			continue
		}
		oh := o.held.Load()
		if oh < 0 || oh == 0 && now-o.last.Load() > within {
			continue
		}
		held[others], claim[others] = oh, max(o.ctl.lastPeak.Load(), o.ctl.peak.Load(), 1)
		plus[others] = !o.ctl.pressed.Load()
		if plus[others] {
			light++
		}
		others++
		if oh == 0 {
			resting++
		}
	}
	keys := c.active.Load() + resting
	if h == 0 {
		keys++ // st, which holds nothing yet
	}
	keys = max(keys, 1) // active may not count st yet: it moves after st's CAS
	base := (all + keys - 1) / keys
	for i := range others {
		s := base
		if plus[i] {
			s++
		}
		kept += max(min(claim[i], s)-held[i], 0)
	}
	pressed = st != nil && st.ctl.pressed.Load()
	switch {
	case pressed:
		share = max(all/keys, 1)
	case keys > 1:
		share = base + 1
	default:
		share = base
	}
	if !pressed {
		light++
	}
	return share, min(kept, all/2), pressed, light
}

// remember puts st among the recent keys, unless it is there already.
func (c *adCore) remember(st *adState) {
	i := st.slot.Load()
	if i > 0 && c.recent[i-1].Load() == st || i < 0 || !st.slot.CompareAndSwap(i, -1) {
		return
	}
	j := c.recentNext.Add(1) % recentKeys
	c.recent[j].Store(st)
	st.slot.Store(int32(j) + 1)
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

// burstBound is the most the admissions within a key's fair share of a
// key not pressed (Default and Sheddable) may take the total to, with room
// the room of their criticality under the overall limit and light the
// keys counted that are not pressed: a quarter of room more, or a slot
// for each light key if that is more (up to half of room; one slot at
// least), and the ceiling at most. Above it only Critical requests pass,
// to the hard bound.
func burstBound(room, light, ceiling int64) int64 {
	return min(room+max(room/4, min(light, room/2), 1), ceiling)
}

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
	if h+n <= roomKey && c.fits(st, h, t, n, crit) {
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
	now := c.clock.now()
	ns := max(now-at, 0)
	st.last.Store(now)
	c.remember(st)
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
