package keylimit

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// What the window types share: the grid of windows aligned to the Unix epoch
// (every window type and the Redis scripts agree on its boundaries), and,
// for FixedWindow and SlidingCounter, a key's state as one packed word and
// the decision on it. A FixedWindow is a SlidingCounter whose previous
// window weighs nothing, so one engine (windowLimiter) serves both.

// windowGrid is the arithmetic of windows aligned to multiples of a period
// since the Unix epoch, in a limiter's time (ns since its creation, see
// timeSource). Windows are numbered from 1, the window that holds the
// earliest clamped time, so that 0 can mean "no window yet" and every window
// of a clamped time has a small positive index.
type windowGrid struct {
	period int64
	// base is the start of window 1: the aligned boundary at or below the
	// earliest clamped time, -maxSpan. It lies less than a period below it.
	base int64
	// cal is the arithmetic of a Calendar limit's windows, nil for one of
	// windows of a Period. Then period is -Calendar, which is no window's
	// length: it only tells the grid apart from a Period's (an Admission's
	// unit), and base is unused.
	cal *calendarGrid
}

func newWindowGrid(period time.Duration, startUnix int64) windowGrid {
	p := int64(period)
	// Boundaries lie at k×p − offset in the limiter's time, where offset is
	// how far into its window the limiter was created.
	offset := startUnix % p
	if offset < 0 {
		offset += p
	}
	return windowGrid{period: p, base: floorDiv(-int64(maxSpan)+offset, p)*p - offset}
}

// floorDiv is a / b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// index returns the window that holds now. now − base is in [0, 2^62): an
// unsigned division suffices. The grid's methods are a Period's arithmetic;
// a Calendar's is cal's, which windowRules' methods of the same names
// choose between.
func (g *windowGrid) index(now int64) uint64 {
	return uint64(now-g.base)/uint64(g.period) + 1
}

// start returns the first instant of window w; end, the first instant after it.
func (g *windowGrid) start(w uint64) int64 { return g.base + int64(w-1)*g.period }
func (g *windowGrid) end(w uint64) int64   { return g.base + int64(w)*g.period }

// current returns the window in which a state last written in window w
// decides at now: now's window, or w itself if now is earlier, because the
// clock stepped back and time does not go back inside a state. w == 0 (no
// window yet) gives now's window. It divides only when the window changes.
func (g *windowGrid) current(w uint64, now int64) uint64 {
	if w != 0 && now < g.end(w) {
		return w
	}
	return g.index(now)
}

// index, start and end are the grid's, or its Calendar's: one test of
// cal, and a call only for a Calendar. (The decision's path, at and
// decide, tests cal itself: see at.)
func (r *windowRules) index(now int64) uint64 {
	if c := r.grid.cal; c != nil {
		return c.index(now)
	}
	return r.grid.index(now)
}

func (r *windowRules) start(w uint64) int64 {
	if c := r.grid.cal; c != nil {
		return c.start(w)
	}
	return r.grid.start(w)
}

func (r *windowRules) end(w uint64) int64 {
	if c := r.grid.cal; c != nil {
		return c.end(w)
	}
	return r.grid.end(w)
}

// windowRules is the arithmetic of one FixedWindow or SlidingCounter limit.
// A key's word under it packs the window the key last admitted in (its grid
// index; 0, a new key's value, is none), the events admitted in it
// (current), and for a SlidingCounter those admitted in the window before
// (previous):
//
//	FixedWindow:    window<<shift | current
//	SlidingCounter: window<<(2×shift) | previous<<shift | current
//
// A change of limit may carry counts above the new Events (see SetLimit).
type windowRules struct {
	grid    windowGrid
	events  uint64
	shift   uint   // bits of each count, below 64
	wshift  uint   // where the window index starts: shift × the number of counts, below 64
	mask    uint64 // a count's bits: 1<<shift − 1
	sliding bool   // SlidingCounter: the previous window's count weighs on the current one
	// plain is a FixedWindow of a Period (not sliding, no Calendar): its
	// decisions in the word's window take the short path in decide.
	plain bool
}

// newWindowRules checks l for a FixedWindow (sliding false) or a
// SlidingCounter and returns its arithmetic on the grid of a limiter
// created at startUnix.
func newWindowRules(l Limit, startUnix int64, sliding bool) (windowRules, error) {
	if err := l.validateWindow(); err != nil {
		return windowRules{}, err
	}
	name, counts, hint := "FixedWindow", uint(1), ""
	if sliding {
		if l.Calendar != 0 {
			return windowRules{}, fmt.Errorf("keylimit: a SlidingCounter slides over a Period, not per %v of the calendar: use a FixedWindow", l.Calendar.name())
		}
		name, counts, hint = "SlidingCounter", 2, ": use a longer Period, or a FixedWindow or TokenBucket"
	}
	// Each count takes an equal share of the bits the window index leaves.
	// Clamped times span less than 3×2^60 ns, and the grid starts less than
	// a period before them, so no index exceeds 3×2^60/p + 2; one more
	// keeps an all-ones word, a sentinel, from ever being a live state.
	var maxIndex uint64
	var grid windowGrid
	if l.Calendar != 0 {
		maxIndex = l.Calendar.maxIndex()
		grid = windowGrid{period: -int64(l.Calendar), cal: newCalendarGrid(l.Calendar, l.location(), startUnix)}
	} else {
		maxIndex = uint64(3<<60)/uint64(l.Period) + 2
		grid = newWindowGrid(l.Period, startUnix)
	}
	shift := uint(64-bits.Len64(maxIndex+1)) / counts
	if most := uint64(1)<<shift - 1; uint64(l.Events) > most {
		return windowRules{}, fmt.Errorf("keylimit: a %s counts at most %d events per %v, not %d%s", name, most, l.per(), l.Events, hint)
	}
	return windowRules{
		grid:    grid,
		events:  uint64(l.Events),
		shift:   shift,
		wshift:  shift * counts,
		mask:    1<<shift - 1,
		sliding: sliding,
		plain:   !sliding && l.Calendar == 0,
	}, nil
}

// windowView is a key's word as seen at one time: the window it decides in,
// the counts that weigh there, and (for a SlidingCounter) how far into the
// window it is.
type windowView struct {
	w             uint64
	previous, cur uint64
	elapsed       int64 // since the window's start, in [0, period); SlidingCounter only
}

// at returns the view of a state holding word at now, for a grid of a
// Period (view chooses between it and atCalendar; decide, itself). A state
// whose window is later than now's (the clock stepped back) decides as at
// its window's start. It calls nothing, so that it needs no frame.
func (r *windowRules) at(word uint64, now int64) windowView {
	last := word >> r.wshift
	w := r.grid.current(last, now)
	if w == last {
		return r.inOwnWindow(word, last, now)
	}
	v := windowView{w: w}
	if r.sliding {
		if w == last+1 {
			v.previous = word & (1<<r.shift - 1)
		}
		v.elapsed = max(now-r.grid.start(w), 0)
	}
	return v
}

// inOwnWindow is at's view of word at now when now is in word's own window
// last (or before it, the clock having stepped back): the counts are the
// word's.
func (r *windowRules) inOwnWindow(word, last uint64, now int64) windowView {
	mask := uint64(1)<<r.shift - 1
	v := windowView{w: last, cur: word & mask}
	if r.sliding {
		v.previous = word >> r.shift & mask
		v.elapsed = max(now-r.grid.start(last), 0)
	}
	return v
}

// atCalendar is at for a Calendar's FixedWindow.
func (r *windowRules) atCalendar(word uint64, now int64) windowView {
	mask := uint64(1)<<r.shift - 1
	last := word >> r.wshift
	v := windowView{w: r.grid.cal.current(last, now)}
	if v.w == last {
		v.cur = word & mask
	}
	return v
}

// view is at or atCalendar, as r's grid is.
func (r *windowRules) view(word uint64, now int64) windowView {
	if r.grid.cal != nil {
		return r.atCalendar(word, now)
	}
	return r.at(word, now)
}

// pack returns the word of v.
func (r *windowRules) pack(v windowView) uint64 {
	return v.w<<r.wshift | v.previous<<r.shift | v.cur
}

// fits reports whether n more events fit v. For a FixedWindow (previous
// always 0) that is cur + n <= events; a SlidingCounter's estimate adds the
// previous count weighted by the share of the previous window still inside
// the sliding one: previous × (period − elapsed)/period + cur + n <= events,
// computed as previous × (period − elapsed) <= (events − cur − n) × period
// in 128 bits.
func (r *windowRules) fits(v windowView, n uint64) bool {
	if v.cur+n > r.events {
		return false
	}
	if v.previous+v.cur+n <= r.events {
		return true // the previous count weighs at most itself
	}
	h1, l1 := bits.Mul64(v.previous, uint64(r.grid.period-v.elapsed))
	h2, l2 := bits.Mul64(r.events-v.cur-n, uint64(r.grid.period))
	return h1 < h2 || h1 == h2 && l1 <= l2
}

// windowDecision is a decision on n events made at now, on view (which
// holds the n events when admitted).
type windowDecision struct {
	c    *keyConfig[windowRules] // the limit decided under
	v    verdict
	now  int64
	view windowView
	n    uint64
	st   *windowState // the state decided on
	key  uint64       // the key's hash, for an Admission
}

// result reports d as a Result.
func (r *windowRules) result(ok bool, d *windowDecision) (res Result) {
	r.resultTo(&res, ok, d)
	return
}

// resultTo is result, written to res, a zero Result, field by field.
func (r *windowRules) resultTo(res *Result, ok bool, d *windowDecision) {
	v := d.view
	res.Allowed, res.Limit = ok, int(r.events)
	if w := r.weight(v) + v.cur; w < r.events {
		res.Remaining = int(r.events - w)
	}
	switch {
	case v.cur > 0 && r.sliding:
		res.ResetAfter = time.Duration(r.grid.start(v.w) + 2*r.grid.period - d.now)
	case v.cur > 0 || v.previous > 0:
		res.ResetAfter = time.Duration(r.end(v.w) - d.now)
	}
	if !ok {
		res.RetryAfter = time.Duration(r.fitsAt(v, d.n) - d.now)
	}
	if res.Remaining < int(r.events) {
		// One more than Remaining fits from when the count drops by one.
		res.RefillAfter = time.Duration(r.fitsAt(v, uint64(res.Remaining)+1) - d.now)
	}
}

// idleAt returns the earliest time at which a state holding word is
// indistinguishable from a new key's: when no count weighs any more (the
// window's end for its current count, one window later for a
// SlidingCounter's, whose count weighs on the next window as its previous),
// and not before its window starts (a clock that stepped back before it
// must not forget that time had reached it).
func (r *windowRules) idleAt(word uint64) int64 {
	mask := uint64(1)<<r.shift - 1
	w := word >> r.wshift
	if w == 0 {
		return minTime
	}
	switch {
	case word&mask > 0 && r.sliding:
		return r.start(w) + 2*r.grid.period
	case word&mask > 0 || r.sliding && word>>r.shift&mask > 0:
		return r.end(w)
	default:
		return r.start(w)
	}
}

// carry returns the word under the limit to that holds what word, not idle
// at now, holds under r (see each type's SetLimit): the window of to that
// holds now (or the start of word's window, if the clock stepped back
// before it), with the current count of word's window, and its previous
// count if the window before it ended after the new previous window began.
// Counts saturate if to's fields are narrower. A count carried to another
// zone's calendar (the same period) goes to the new zone's window that
// holds the last second of word's window: a change of zone never ends the
// key's window earlier than the old zone would have.
func (r *windowRules) carry(word uint64, to *windowRules, now int64) uint64 {
	v := r.view(word, now)
	start := r.start(v.w)
	at := max(now, start)
	if c, d := r.grid.cal, to.grid.cal; c != nil && d != nil && c.cal == d.cal && v.cur > 0 {
		// Else a key moved to the zone whose boundary comes next gets a
		// fresh quota there, and again at the next one: ten a day, moved
		// 34 times in a day, admitted 340 events (issue 37.4). Boundaries
		// are whole seconds: end − 1 ns is in the window's last one.
		at = max(at, r.end(v.w)-1)
		return d.indexAt(at)<<to.wshift | saturate(v.cur, to.shift)
	}
	w := to.index(at)
	var previous uint64
	if to.sliding && start > to.start(w)-to.grid.period {
		previous = v.previous
	}
	return w<<to.wshift | saturate(previous, to.shift)<<to.shift | saturate(v.cur, to.shift)
}

// saturate returns count, or the most a field of bits holds if less.
func saturate(count uint64, bits uint) uint64 { return min(count, 1<<bits-1) }

// refund returns word with up to n events admitted in window w given back,
// or false if none of them still counts: they are the current count while
// w is the word's window, a SlidingCounter's previous count the window after,
// and nothing once a later window has begun.
func (r *windowRules) refund(word uint64, w, n uint64) (uint64, bool) {
	mask := uint64(1)<<r.shift - 1
	var at uint // where w's count is in the word
	switch last := word >> r.wshift; {
	case last == w:
	case r.sliding && last == w+1:
		at = r.shift
	default:
		return word, false
	}
	give := min(n, word>>at&mask)
	return word - give<<at, give > 0
}

// windowState is one key's state in a FixedWindow or a SlidingCounter: one
// packed word, under one limit for the state's whole life.
type windowState struct {
	// word is the key's window and counts, packed as cfg's rules say.
	// Admissions write it by CAS from the value they read; Refund lowers the
	// counts by CAS. Two sentinels end a state's life, after which nothing
	// writes it again and callers look the key up afresh (shard.replace):
	// retiredWord (Reset, the evictor) and movedWord (a change of limit
	// moved the key to a new state, see moveKey). A live word never has all
	// its window bits set (see newWindowRules).
	word atomic.Uint64
	cfg  *keyConfig[windowRules]
}

const (
	retiredWord = ^uint64(0)
	movedWord   = ^uint64(1)
)

// retire retires st whatever it holds, unless a change of limit moved it
// first (see resetKey).
func (st *windowState) retire() bool {
	for {
		word := st.word.Load()
		switch {
		case word == retiredWord:
			return true
		case word == movedWord:
			return false
		case st.word.CompareAndSwap(word, retiredWord):
			return true
		}
	}
}

// retireIfIdle retires st if it is idle at now, deciding and retiring in one
// CAS; otherwise it returns when st could be idle. A state under a stale
// limit is judged under its own: it never changes limit in place.
func (st *windowState) retireIfIdle(now int64) (bool, int64) {
	word := st.word.Load()
	if word >= movedWord {
		return false, now // being removed by Reset, or moved
	}
	at := st.cfg.arith.idleAt(word)
	return at <= now && st.word.CompareAndSwap(word, retiredWord), at
}

// moveTo is moveKey's carry for a windowState: it retires st as moved and
// returns a state under c holding what st holds. A state idle at now, which
// the evictor could have forgotten, moves as a new key's, so that eviction
// changes no decision after a change of limit either.
func (st *windowState) moveTo(c *keyConfig[windowRules], now int64) (*windowState, bool) {
	nu := &windowState{cfg: c}
	for {
		word := st.word.Load()
		if word >= movedWord {
			return nil, false
		}
		if c.err == nil && st.cfg.arith.idleAt(word) > now {
			nu.word.Store(st.cfg.arith.carry(word, &c.arith, now))
		}
		if st.word.CompareAndSwap(word, movedWord) {
			return nu, true
		}
	}
}

// windowLimiter is the engine of FixedWindow and SlidingCounter.
type windowLimiter[K comparable] struct {
	keys    *shard[K, windowState]
	policy  *policy[K, windowRules] // not inline: the evictor holds it, and must not hold the limiter
	evictor *evictor
	owner   any // the FixedWindow or SlidingCounter w is the engine of: its Admissions' By
}

// init sets w up for l and opts: a SlidingCounter if sliding, else a
// FixedWindow. owner is the limiter that w belongs to, whose collection
// stops the evictor.
func initWindowLimiter[K comparable, T any](w *windowLimiter[K], owner *T, l Limit, opts []Option, sliding bool) error {
	// The limit is checked before the options (its grid, built below,
	// needs the clock the options give).
	if _, err := newWindowRules(l, 0, sliding); err != nil {
		return err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	pol := &policy[K, windowRules]{burstless: true}
	w.policy = pol
	w.keys = newShard(o, stateHooks[K, windowState]{
		newState:     func(key K) *windowState { return &windowState{cfg: pol.resolve(key)} },
		retireIfIdle: (*windowState).retireIfIdle,
		retire:       func(st *windowState) { st.retire() },
	})
	// The grids align to the clock's reading at creation, known only now.
	start := w.keys.clock.startUnix
	if err := pol.init(l, func(l Limit) (windowRules, error) { return newWindowRules(l, start, sliding) }); err != nil {
		return err
	}
	span := l.span()
	if sliding {
		span *= 2
	}
	w.owner = owner
	w.evictor = startEvictor(owner, w.keys, o, span)
	return nil
}

// decide counts n >= 1 events for key if they fit, and reports whether
// Allow passes them: admitted, or untracked under WithOverflow's admission.
// It counts the verdict for Stats (see shardStats.count). Unless d is nil,
// it writes there the limit it decided under and its verdict, and the
// decision when admitted or refused. Allow's call, with d nil, is so small
// that each type's Allow inlines it, and calls decide itself (go build
// -gcflags=-m: "inlining call to (*windowLimiter[go.shape.string]).allow"):
// one frame fewer on every call.
//
// The loop works on locals and writes d once, when it returns: d is the
// caller's, in memory, and a view written there would be read back.
func (w *windowLimiter[K]) decide(key K, n int, d *windowDecision) bool {
	h := w.keys.hash(key)
	st := w.keys.lookup(h)
	if st == nil {
		// A request that can never pass must not create the key.
		if c := w.policy.resolve(key); c.err != nil || uint64(n) > c.arith.events {
			return w.finish(d, c, never)
		}
		if st = w.keys.loadOrCreate(key); st == nil {
			return w.finish(d, w.policy.resolve(key), untracked)
		}
	}
	un := uint64(n)
	// The clock is read before the word, after the state was found: the
	// word's load and its CAS are then a few instructions apart, so another
	// caller of a hot key rarely takes the line between them. A reading
	// older than some admission the word holds decides in the word's own
	// window, as at that admission's time or later, and a refusal stands on
	// it only if the word did not move while the clock was read (see
	// DESIGN.md, "Stale clock readings").
	seen := st.word.Load() // the word before the reading
	var now int64
	if clk := &w.keys.clock; clk.injected == nil {
		// timeSource.now's system clock, by hand: now is too large to
		// inline, and its call is 20 instructions of a refusal's 450.
		now = clampTime(int64(time.Since(clk.start)))
	} else {
		now = clk.now()
	}
	old := st.word.Load()
	var bo backoff
	for {
		c := st.cfg
		if old >= movedWord || c.stale() {
			if st = w.settle(key, st, old); st == nil {
				return w.finish(d, w.policy.resolve(key), untracked)
			}
			// Another state: only a reading taken after it decides on it.
			seen = st.word.Load()
			now, old = w.keys.clock.now(), st.word.Load()
			continue
		}
		r := &c.arith
		if c.err != nil || un > r.events {
			return w.finish(d, c, never)
		}
		// On a grid of a Period, the view is found in line: in the word's
		// own window, the common case, it is the word's counts, in a few
		// instructions between the load and the CAS. A SlidingCounter's
		// word is often a window behind (a flood refused after a boundary
		// writes nothing, so the word stays there until an admission),
		// where the word's count is the previous one; any later window
		// starts empty. (A new key's word, 0, is in window 0, which ends at
		// the grid's base, before every time.) These are at's cases,
		// without its call; a Calendar's windows take atCalendar.
		var v windowView
		own := false
		if r.grid.cal == nil {
			last := old >> (r.wshift & 63)
			switch end := r.grid.end(last); {
			case now < end:
				own = true
				v.w, v.cur = last, old&r.mask
				if r.sliding {
					v.previous = old >> (r.shift & 63) & r.mask
					v.elapsed = max(now-(end-r.grid.period), 0)
				}
			case r.sliding && now-end < r.grid.period:
				// The next window: windows are aligned, it starts at end.
				v = windowView{w: last + 1, previous: old & r.mask, elapsed: now - end}
			default:
				v.w = r.grid.index(now)
				if r.sliding {
					v.elapsed = now - r.grid.start(v.w)
				}
			}
		} else {
			v = r.atCalendar(old, now)
		}
		if !r.fits(v, un) {
			if old == seen {
				if d != nil {
					d.c, d.v, d.now, d.view, d.n = c, refused, now, v, un
				}
				w.keys.counts.count(refused, w.keys.overflow)
				return false
			}
			// The word moved while the clock was read: the reading may
			// be older than an admission it now holds. A reading taken
			// after the load decides.
			seen, now = old, w.keys.clock.now()
			continue
		}
		v.cur += un
		next := old + un // the count is the word's low bits
		if !own {
			next = r.pack(v)
		}
		if st.word.CompareAndSwap(old, next) {
			if d != nil {
				d.c, d.v, d.now, d.view, d.n, d.st, d.key = c, admitted, now, v, un, st, h
			}
			w.keys.counts.count(admitted, w.keys.overflow)
			return true
		}
		// Lost to another caller of the key: let it run on, then try
		// afresh (see backoff).
		bo.Wait()
		seen = st.word.Load()
		now, old = w.keys.clock.now(), st.word.Load()
	}
}

// finish is decide's return for a verdict off the hot path, never or
// untracked, decided under c.
func (w *windowLimiter[K]) finish(d *windowDecision, c *keyConfig[windowRules], v verdict) bool {
	if d != nil {
		d.c, d.v = c, v
	}
	w.keys.counts.count(v, w.keys.overflow)
	return w.keys.overflow.allows(v)
}

// settle returns the state to go on with when st, key's state, which held
// old, cannot decide: old was a sentinel (st's replacement), or st is under
// a stale limit (the state it moves to). It returns nil if the key can no
// longer be tracked.
func (w *windowLimiter[K]) settle(key K, st *windowState, old uint64) *windowState {
	if old >= movedWord {
		return w.keys.replace(key, st)
	}
	if st = moveKey(w.keys, w.policy, key, st, (*windowState).moveTo); st == nil {
		st = w.keys.loadOrCreate(key)
	}
	return st
}

// allow is Allow for both types: allowN(key, 1), small enough to inline
// into each type's Allow (see decide).
func (w *windowLimiter[K]) allow(key K) bool { return w.decide(key, 1, nil) }

// allowN is AllowN for both types.
func (w *windowLimiter[K]) allowN(key K, n int) bool {
	if n <= 0 {
		return n == 0
	}
	return w.decide(key, n, nil)
}

// admit is Take for both types, writing its Result to r, and when a is not
// nil and the events are admitted, fills in their Admission, with a once
// from o if o is not nil (Admit's). *r and *a are zero until then (see
// TokenBucket.admit).
func (w *windowLimiter[K]) admit(key K, n int, a *Admission, o *onces, r *Result) {
	if n <= 0 {
		*r = impossible(w.peek(key), n)
		return
	}
	var epoch uint64
	if a != nil {
		epoch = w.keys.resets.Load() // before: a Reset after this may forget the admission
	}
	var d windowDecision
	w.decide(key, n, &d) // counted there
	c, v := d.c, d.v
	switch v {
	case untracked:
		*r = w.keys.untracked(int(c.arith.events), n)
		return
	case never:
		*r = impossible(w.peek(key), n)
		return
	case admitted:
		if a != nil {
			// Field by field: *a is zero, and a literal would be built
			// and then copied.
			a.N, a.Mark, a.By, a.state, a.key, a.epoch, a.unit = n, int64(d.view.w), w.owner, d.st, d.key, epoch, c.arith.grid.period
			if o != nil {
				a.once, a.slot = o.take(d.key, n)
			}
		}
	}
	c.arith.resultTo(r, v == admitted, &d)
}

// peek is Peek for both types.
func (w *windowLimiter[K]) peek(key K) (res Result) {
	w.peekTo(key, &res)
	return
}

// peekTo is peek, writing its Result to res, a zero Result.
func (w *windowLimiter[K]) peekTo(key K, res *Result) {
	d := windowDecision{now: w.keys.clock.now(), n: 1}
	word, c := w.observe(key)
	if c.err != nil {
		*res = Result{Limit: int(c.arith.events), RetryAfter: InfDuration, Err: c.err}
		return
	}
	r := &c.arith
	d.view = r.view(word, d.now)
	r.resultTo(res, r.fits(d.view, 1), &d)
}

// observe returns key's word and the limit it is under, or 0 (empty) and
// the key's limit for a key not tracked. A state under a stale limit is
// moved to the current one first.
func (w *windowLimiter[K]) observe(key K) (uint64, *keyConfig[windowRules]) {
	for {
		st := w.keys.load(key)
		if st == nil {
			return 0, w.policy.resolve(key)
		}
		word := st.word.Load()
		switch {
		case word == retiredWord:
			return 0, w.policy.resolve(key)
		case word == movedWord:
			runtime.Gosched() // the map shows the new state in a moment
			continue
		case st.cfg.stale():
			moveKey(w.keys, w.policy, key, st, (*windowState).moveTo)
			continue
		}
		return word, st.cfg
	}
}

// refund gives back what a, an Admission for key, still holds (see Refund).
// It follows the key to the state a change of limit moved it to, if the
// windows are the same and no Reset came between. An Admission of another
// key gives back nothing.
func (w *windowLimiter[K]) refund(key K, a *Admission) {
	st, ok := a.state.(*windowState)
	if !ok || !madeBy(a.By, w.owner) || !w.keys.ofKey(key, a) {
		return
	}
	n, ok := a.claim()
	if !ok || n <= 0 {
		return
	}
	for {
		old := st.word.Load()
		switch old {
		case retiredWord:
			return // Reset, or evicted once idle (so nothing to give)
		case movedWord:
			if w.keys.resets.Load() != a.epoch {
				return // a Reset may have forgotten the admission
			}
			next := w.keys.load(key)
			if next == nil {
				return // evicted once idle under its new limit
			}
			if next == st {
				runtime.Gosched() // the map shows the new state in a moment
			}
			st = next
			continue
		}
		r := &st.cfg.arith
		if r.grid.period != a.unit {
			return // moved to windows of another length: the window is gone
		}
		word, ok := r.refund(old, uint64(a.Mark), uint64(n))
		if !ok || st.word.CompareAndSwap(old, word) {
			return
		}
	}
}

// reset is Reset for both types.
func (w *windowLimiter[K]) reset(key K) { resetKey(w.keys, key, (*windowState).retire) }

// The estimate. With previous 0, which a FixedWindow's view always has, it
// is the fixed window's count.

// weight returns ⌈previous × (period − elapsed) / period⌉: the previous
// window's events that still count, rounded up to whole events.
func (r *windowRules) weight(v windowView) uint64 {
	if v.previous == 0 {
		return 0
	}
	hi, lo := bits.Mul64(v.previous, uint64(r.grid.period-v.elapsed))
	q, rem := bits.Div64(hi, lo, uint64(r.grid.period)) // q <= previous: no overflow
	if rem != 0 {
		q++
	}
	return q
}

// fitsAt returns the earliest time at which n events fit a state that
// refuses them on v. For a FixedWindow that is the window's end. A
// SlidingCounter's estimate only falls as time passes, so it is the least
// elapsed time in v's window at which previous × (period − elapsed) <=
// (events − cur − n) × period, or else the least in the next window, where
// cur has become the previous count.
func (r *windowRules) fitsAt(v windowView, n uint64) int64 {
	if !r.sliding {
		if c := r.grid.cal; c != nil {
			return c.end(v.w)
		}
		return r.grid.end(v.w)
	}
	p := uint64(r.grid.period)
	start := r.grid.start(v.w)
	if v.cur+n <= r.events {
		// Refused, so previous × period > (events − cur − n) × period: the
		// quotient is below period, and Div64 cannot overflow.
		hi, lo := bits.Mul64(r.events-v.cur-n, p)
		q, _ := bits.Div64(hi, lo, v.previous)
		return start + int64(p-q)
	}
	// Next window: cur × (period − elapsed) <= (events − n) × period, where
	// cur > events − n >= 0, so again the quotient is below period.
	hi, lo := bits.Mul64(r.events-n, p)
	q, _ := bits.Div64(hi, lo, v.cur)
	return start + int64(2*p-q)
}

// The methods a FixedWindow and a SlidingCounter give their Keyed: both are
// a windowLimiter, which is their Keyed's limiter (see keyedLimiter).

// Take is the window types' Take.
func (w *windowLimiter[K]) Take(key K, n int) (r Result) {
	w.admit(key, n, nil, nil, &r)
	return
}

// resetKey is Reset.
func (w *windowLimiter[K]) resetKey(key K) { w.reset(key) }

// stats is Stats.
func (w *windowLimiter[K]) stats() Stats { return w.keys.stats() }

// timers is the clock the limiter reads: WithClock's, or the system clock.
func (w *windowLimiter[K]) timers() clock.Clock { return w.keys.clock.timers }

// stop stops the evictor.
func (w *windowLimiter[K]) stop() { w.evictor.close() }

// waitKey is WaitN: it polls (see Keyed.WaitN).
func (w *windowLimiter[K]) waitKey(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, w, w.timers(), key, n)
}

// limits is the limiter's policy, for its Keyed.
func (w *windowLimiter[K]) limits() keyLimits[K] { return w.policy }
