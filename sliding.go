package keylimit

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// MaxSlidingWindowEvents is the largest Limit.Events a SlidingWindow accepts:
// it keeps 8 bytes per event of the quota for every active key, 80 KB at this
// cap. For larger quotas use a SlidingCounter, whose key costs 16 bytes
// whatever the quota.
const MaxSlidingWindowEvents = 10_000

// SlidingWindow limits each key exactly to Limit.Events in any interval of
// length Limit.Period: it admits n events at time t if and only if at most
// Events − n were admitted in (t − Period, t]. It has no boundary at which a
// client can pass twice its quota. Limit.Burst is ignored.
//
// It keeps a log of each key's last Events admission times, a ring of
// 8 × Events bytes allocated on the key's first admission (so Events is
// capped at MaxSlidingWindowEvents). Admissions take a per-key lock, since
// the log and its head are two words: one compare-and-swap of the log's
// sequence number, from the snapshot they judged. Refusals and Peek read a
// consistent snapshot without it and write nothing. RetryAfter is when enough of the
// oldest entries leave for the request to fit; ResetAfter when the newest
// leaves. If an injected clock steps back, the key decides at the time of
// its newest entry: a step back never reopens capacity.
//
// SetLimit keeps the admission times still in a key's window, in a log
// resized to the new Events (entries a smaller log has no room for are kept
// as a count, and come back if it grows again), so however often the limit
// changes a key admits at most the largest Events of the limits in any
// interval of the shortest Period.
type SlidingWindow[K comparable] struct {
	Keyed[K]

	keys    *shard[K, slidingState]
	policy  *policy[K, slidingRules] // not inline: the evictor holds it, and must not hold the window
	evictor *evictor
}

// slidingRules is the arithmetic of one SlidingWindow limit.
type slidingRules struct {
	events int
	period int64
}

// newSlidingRules checks l for a SlidingWindow and returns its arithmetic.
func newSlidingRules(l Limit) (slidingRules, error) {
	if err := l.validateWindow(); err != nil {
		return slidingRules{}, err
	}
	if l.Calendar != 0 {
		return slidingRules{}, fmt.Errorf("keylimit: a SlidingWindow slides over a Period, not per %v of the calendar: use a FixedWindow", l.Calendar.name())
	}
	if l.Events > MaxSlidingWindowEvents {
		return slidingRules{}, fmt.Errorf("keylimit: a SlidingWindow keeps at most %d events per key (8 bytes each), not %d: use a SlidingCounter for large quotas",
			MaxSlidingWindowEvents, l.Events)
	}
	return slidingRules{events: l.Events, period: int64(l.Period)}, nil
}

// slidingState is one key's log.
type slidingState struct {
	// seq is the state's lock and its version: odd while a writer
	// changes pos or log. A writer (an admission, Refund, retirement, a
	// move) takes it by a CAS from even to odd and releases it with the
	// next even value (see lock), so every writer changes it. A reader
	// reads seq, then what it needs, then seq again: if seq was even and
	// has not changed, what it read is one consistent state.
	seq atomic.Uint64
	// pos is head<<32 | phantoms<<16 | size: the last size admissions are
	// in the size slots before head (mod Events), oldest first. phantoms
	// counts admissions older than the oldest entry that the log has no
	// room for: a change to a smaller Events kept only the newest entries
	// (see SetLimit). They are not judged (a log that has phantoms is
	// full, so its oldest entry decides for them, being newer), but they
	// come back if a change grows the log again. An admission, which writes
	// pos from head and size, forgets them: a full log's admission
	// overwrites its oldest entries, which had left the window, and the
	// phantoms are older. Two sentinels end the state's life, after which
	// nothing writes it again and callers look the key up afresh
	// (shard.replace): retiredPos (Reset, the evictor) and movedPos (a change
	// of limit moved the key to a new state).
	pos atomic.Uint64
	// log holds admission times in ns since the limiter's creation, in
	// nondecreasing order from the oldest slot to the newest: an admission
	// records max(now, newest entry), so time never goes back in the log.
	// It has one slot per event of cfg's Events.
	log []atomic.Int64
	// cfg is the limit the log is under, for the state's whole life.
	cfg *keyConfig[slidingRules]
}

// The sentinels of slidingState.pos. A live pos has head < Events < 2^16.
const (
	retiredPos = ^uint64(0)
	movedPos   = ^uint64(1)
)

func newSlidingState(c *keyConfig[slidingRules]) *slidingState {
	return &slidingState{log: make([]atomic.Int64, c.arith.events), cfg: c}
}

// NewSlidingWindow returns a SlidingWindow that admits at most l.Events per
// key in any interval of length l.Period. It returns an error if l or an
// option is invalid, or if l.Events is above MaxSlidingWindowEvents.
//
// The limiter forgets a key once its newest admission has left the window
// (see WithEvictionInterval and WithMaxKeys). Call Close when done with it to
// stop its evictor at once; a limiter dropped without Close stops it once
// the garbage collector finds it unreachable.
func NewSlidingWindow[K comparable](l Limit, opts ...Option) (*SlidingWindow[K], error) {
	if _, err := newSlidingRules(l); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	pol := &policy[K, slidingRules]{burstless: true}
	if err := pol.init(l, newSlidingRules); err != nil {
		return nil, err
	}
	s := &SlidingWindow[K]{
		keys: newShard(o, stateHooks[K, slidingState]{
			newState:     func(key K) *slidingState { return newSlidingState(pol.resolve(key)) },
			retireIfIdle: (*slidingState).retireIfIdle,
			retire:       func(st *slidingState) { st.retire() },
		}),
		policy: pol,
	}
	s.Keyed = Keyed[K]{of: s, sliding: s}
	s.evictor = startEvictor(s, s.keys, o, l.Period)
	return s, nil
}

// Allow reports whether one event for key may happen now, and records it if
// so. Allow is shorthand for AllowN(key, 1).
//
// Allow is small enough for the type's own Allow, the method an interface
// calls, to inline, so that it calls decide itself (see decide).
func (s *SlidingWindow[K]) Allow(key K) bool { return s.decide(key, 1, nil) }

// AllowN reports whether n events for key may happen now, and records all n
// if so; otherwise it records nothing. AllowN is Take(key, n).Allowed without
// the work of filling in the rest of the Result.
func (s *SlidingWindow[K]) AllowN(key K, n int) bool {
	if n <= 0 {
		return n == 0
	}
	var d slidingDecision
	s.decide(key, n, &d)
	return s.keys.counts.admits(d.v, s.keys.overflow)
}

// Take records n events for key if all n fit in the window, and reports the
// decision and the window after it. A refused call changes nothing.
//
// n == 0 is always allowed and records nothing. n < 0, or n above Events,
// can never pass: the Result is refused with RetryAfter InfDuration.
func (s *SlidingWindow[K]) Take(key K, n int) (r Result) {
	s.admit(key, n, nil, nil, &r)
	return
}

// admitPart is Admit for All, without the once (see partAdmitter).
func (s *SlidingWindow[K]) admitPart(_ context.Context, key K, n int) (r Result, a Admission, err error) {
	s.admit(key, n, &a, nil, &r)
	return // naked, as Admit's
}

// admit is Take, writing its Result to r, and when a is not nil and the
// events are recorded, fills in their Admission, with a once from o if o is
// not nil (Admit's). *r and *a are zero until then (see TokenBucket.admit).
func (s *SlidingWindow[K]) admit(key K, n int, a *Admission, o *onces, r *Result) {
	if n <= 0 {
		*r = impossible(s.Peek(key), n)
		return
	}
	var epoch uint64
	if a != nil {
		epoch = s.keys.resets.Load() // before: a Reset after this may forget the admission
	}
	d := slidingDecision{report: true}
	s.decide(key, n, &d)
	c, v := d.c, d.v
	s.keys.counts.admits(v, s.keys.overflow)
	switch v {
	case untracked:
		*r = s.keys.untracked(c.arith.events, n)
		return
	case never:
		*r = impossible(s.Peek(key), n)
		return
	case admitted:
		if a != nil {
			// Field by field: *a is zero, and a literal would be built
			// and then copied.
			a.N, a.Mark, a.By, a.state, a.key, a.epoch = n, d.t, s, d.st, d.key, epoch
			if o != nil {
				a.once, a.slot = o.take(d.key, n)
			}
		}
	}
	c.arith.resultTo(r, &d)
}

// peekKey is Peek, writing its Result to res, a zero Result.
func (s *SlidingWindow[K]) peekKey(key K, res *Result) {
	now := s.keys.clock.now()
	d := slidingDecision{report: true}
	for {
		st := s.keys.load(key)
		if st == nil {
			c := s.policy.resolve(key)
			if c.err != nil {
				*res = Result{Limit: c.arith.events, RetryAfter: InfDuration, Err: c.err}
				return
			}
			c.arith.judge(nil, 0, now, 1, &d)
			c.arith.resultTo(res, &d)
			return
		}
		c := st.cfg
		if c.stale() {
			moveKey(s.keys, s.policy, key, st, (*slidingState).moveTo)
			continue
		}
		if c.err != nil {
			*res = Result{Limit: c.arith.events, RetryAfter: InfDuration, Err: c.err}
			return
		}
		r := &c.arith
		for range 4 {
			if r.judgeSnapshot(st, now, 1, &d) {
				r.resultTo(res, &d)
				return
			}
		}
		if r.judgeLocked(st, now, &d) {
			r.resultTo(res, &d)
			return
		}
		runtime.Gosched() // moved: the map shows the new state in a moment
	}
}

// judgeLocked is Peek's judgement under st's lock, for when the lock-free
// reads keep meeting writers. A retired st is judged as a new key's. It
// reports false if st was moved.
func (r *slidingRules) judgeLocked(st *slidingState, now int64, d *slidingDecision) bool {
	defer st.unlock(st.lock())
	switch pos := st.pos.Load(); pos {
	case movedPos:
		return false
	case retiredPos:
		r.judge(nil, 0, now, 1, d)
	default:
		r.judge(st, pos, now, 1, d)
	}
	return true
}

// slidingDecision is a decision on n events and what Result needs of it.
type slidingDecision struct {
	c *keyConfig[slidingRules] // the limit decided under
	v verdict
	// report asks for count, which Take and Peek need and AllowN does not
	// (it costs a binary search of the log). The caller sets it.
	report bool
	ok     bool
	// now is the clock reading it was made at; t, the time it was made
	// for, max(now, the newest entry); newest and oldest, the newest entry
	// after it and the oldest in the window, if count > 0.
	now, t, newest, oldest int64
	// leave is when enough entries leave the window for the request to fit
	// (when refused).
	leave int64
	// count is how many entries are in the window at t, after the decision.
	count int
	// st is the state that recorded an admission; key, the key's hash.
	st  *slidingState
	key uint64
}

// decide records n >= 1 events for key if they fit, and reports whether
// Allow passes them: admitted, or untracked under WithAdmitUntracked. With
// d nil (Allow's call: n is 1, no report) it counts the verdict for Stats
// (see shardStats.count); otherwise it writes to d the limit it decided
// under and its verdict, and the decision when admitted or refused, and the
// caller counts. Allow's call is so small that the type's Allow inlines it
// and calls decide itself (go build -gcflags=-m: "inlining call to
// (*SlidingWindow[go.shape.string]).Allow"): one frame fewer on every call.
func (s *SlidingWindow[K]) decide(key K, n int, d *slidingDecision) bool {
	h := s.keys.hash(key)
	st := s.keys.lookup(h)
	if st == nil {
		// A request that can never pass must not create the key.
		if c := s.policy.resolve(key); c.err != nil || n > c.arith.events {
			return s.finish(d, c, never)
		}
		st = s.keys.loadOrCreate(key)
	}
	// One clock reading serves the call while it decides on one state. A
	// decision under the lock may then see admissions recorded after this
	// reading; it is made at max(now, the newest entry), a time within this
	// call, on the log as it is at that time: exact, and admissions still
	// go in time order. A move or a replacement brings another state,
	// perhaps a fresh one made after the old was found idle at a later
	// time: the clock is read again for it.
	var now int64
	if clk := &s.keys.clock; clk.injected == nil {
		// timeSource.now's system clock, by hand: now is too large to
		// inline, and its call is 20 instructions of a refusal's 400.
		now = clampTime(int64(time.Since(clk.start)))
	} else {
		now = clk.now()
	}
	var w holderWait
	for {
		if st == nil {
			return s.finish(d, s.policy.resolve(key), untracked)
		}
		c := st.cfg
		if c.stale() {
			if st = moveKey(s.keys, s.policy, key, st, (*slidingState).moveTo); st == nil {
				st = s.keys.loadOrCreate(key)
			}
			now = s.keys.clock.now()
			continue
		}
		r := &c.arith
		if c.err != nil || n > r.events {
			return s.finish(d, c, never)
		}
		// A refusal needs no lock: a consistent snapshot that refuses is
		// the state at one instant of this call. An admission takes the
		// lock by a CAS of seq from the value its snapshot began at, so it
		// holds the lock only if no writer ran since: the state is the one
		// the snapshot judged, and the judgement stands.
		seq, snap, ok := st.snapshot()
		if ok {
			var t int64
			var fits bool
			if d == nil || !d.report && n == 1 {
				t, fits = r.fitsOne(st, snap, now) // Allow: no report
			} else {
				r.judge(st, snap, now, n, d)
				t, fits = d.t, d.ok
			}
			if !fits {
				if st.unchanged(seq) {
					if d == nil {
						s.keys.counts.count(refused, s.keys.overflow)
						return false
					}
					d.c, d.v = c, refused
					return false
				}
			} else if st.seq.CompareAndSwap(seq, seq+1) {
				if n == 1 {
					st.appendOne(snap, t)
				} else {
					st.append(snap, t, n)
				}
				if st.release(seq + 2) { // st.unlock, without a call
					unpark(&st.seq)
				}
				if d == nil {
					s.keys.counts.count(admitted, s.keys.overflow)
					return true
				}
				if d.report {
					if d.count == 0 {
						d.oldest = t
					}
					d.count += n
					d.newest = t
					d.st, d.key = st, h
				}
				d.c, d.v = c, admitted
				return true
			}
		} else if seq&1 == 0 {
			// Retired or moved: it stays so.
			st = s.keys.replace(key, st)
			now = s.keys.clock.now()
			continue
		}
		// A writer ran or runs: let it run on, then try afresh (see
		// holderWait).
		w.wait(&st.seq, seq)
		now = s.keys.clock.now()
	}
}

// finish is decide's return for a verdict off the hot path, never or
// untracked, decided under c (see decide).
func (s *SlidingWindow[K]) finish(d *slidingDecision, c *keyConfig[slidingRules], v verdict) bool {
	if d == nil {
		s.keys.counts.count(v, s.keys.overflow)
	} else {
		d.c, d.v = c, v
	}
	return s.keys.overflow.allows(v)
}

// moveTo is moveKey's carry for a SlidingWindow: it retires st as moved and
// returns a state under c holding st's log, resized (see SetLimit).
func (st *slidingState) moveTo(c *keyConfig[slidingRules], now int64) (*slidingState, bool) {
	nu := newSlidingState(c)
	defer st.unlock(st.lock())
	pos := st.pos.Load()
	if pos >= movedPos {
		return nil, false
	}
	if c.err == nil {
		// The admissions that still count under the old limit: the
		// entries in the window that ends at the key's time, and the
		// phantoms, older, only if no entry has left it. Older ones no
		// longer count, and would be gone had the evictor forgotten the
		// key when it was idle: keeping them would let eviction change a
		// decision under a longer Period.
		r := &st.cfg.arith
		d := slidingDecision{report: true}
		r.judge(st, pos, now, 1, &d)
		head, phantoms, size := unpackPos(pos)
		events, first := len(st.log), size-d.count
		if first > 0 {
			phantoms = 0
		}
		// Oldest first: the phantoms at the oldest entry's time, then the
		// entries. The new log takes the newest of them, and counts the
		// rest as its phantoms.
		total := phantoms + d.count
		keep := min(total, c.arith.events)
		for i := range keep {
			entry := first + max(total-keep+i-phantoms, 0) // before first: a phantom
			nu.log[i].Store(st.log[(head-size+entry+events)%events].Load())
		}
		nu.pos.Store(packPos(keep%c.arith.events, total-keep, keep))
	}
	st.pos.Store(movedPos)
	return nu, true
}

// judge decides n events at now on the log of st at pos, without writing,
// into d. st == nil is a key never seen. (The decision goes through a
// pointer: returned by value through the layers above, its copies cost more
// than the decision.)
func (r *slidingRules) judge(st *slidingState, pos uint64, now int64, n int, d *slidingDecision) {
	head, _, size := unpackPos(pos)
	// entry returns the i-th oldest of the size entries.
	entry := func(i int) int64 {
		at := head - size + i // in [-events, events)
		if at < 0 {
			at += r.events
		}
		return st.log[at].Load()
	}
	*d = slidingDecision{now: now, t: now, report: d.report}
	if size > 0 {
		d.newest = entry(size - 1)
		d.t = max(now, d.newest)
	}
	// n fit unless more than Events − n entries are in the window: with
	// the entries in time order, unless the k-th oldest is, k = n − (the
	// empty slots).
	d.ok = true
	if k := n - (r.events - size); k > 0 {
		if e := entry(k - 1); e > d.t-r.period {
			d.ok, d.leave = false, e+r.period
		}
	}
	if d.report {
		// The first entry in the window, by binary search over the log.
		lo, hi := 0, size
		for lo < hi {
			if mid := int(uint(lo+hi) >> 1); entry(mid) > d.t-r.period {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		d.count = size - lo
		if lo < size {
			d.oldest = entry(lo)
		}
	}
}

// fitsOne is judge for one event and no report, the decision of Allow:
// whether it fits at now on the log of st at pos, and the time it is
// recorded at, max(now, the newest entry). With n == 1 the entry judged is
// the oldest of a full log, which is the one at head.
func (r *slidingRules) fitsOne(st *slidingState, pos uint64, now int64) (t int64, ok bool) {
	// unpackPos without the phantoms: with it, fitsOne is over the
	// inliner's budget.
	head, size := int(pos>>32), int(pos&(1<<16-1))
	if size == 0 {
		return now, true
	}
	newest := head - 1
	if newest < 0 {
		newest = len(st.log) - 1
	}
	t = max(now, st.log[newest].Load())
	return t, size < len(st.log) || st.log[head].Load() <= t-r.period
}

// result reports decision d as a Result.
func (r *slidingRules) result(d slidingDecision) (res Result) {
	r.resultTo(&res, &d)
	return
}

// resultTo is result, written to res, a zero Result, field by field.
func (r *slidingRules) resultTo(res *Result, d *slidingDecision) {
	res.Allowed, res.Limit, res.Remaining = d.ok, r.events, r.events-d.count
	if d.count > 0 {
		res.ResetAfter = time.Duration(d.newest + r.period - d.now)
		res.RefillAfter = time.Duration(d.oldest + r.period - d.now)
	}
	if !d.ok {
		res.RetryAfter = time.Duration(d.leave - d.now)
	}
}

// judgeSnapshot judges n events at now on st without its lock, into d, and
// reports whether d is one state's decision: false if a writer ran while it
// read (see slidingState.seq) or st is retired.
func (r *slidingRules) judgeSnapshot(st *slidingState, now int64, n int, d *slidingDecision) bool {
	seq, pos, ok := st.snapshot()
	if !ok {
		return false
	}
	r.judge(st, pos, now, n, d)
	return st.unchanged(seq)
}

// snapshot begins a read of st without its lock: it returns the sequence
// number to check with unchanged once done, and pos. ok is false if a
// writer is mid-way or st is retired or moved.
func (st *slidingState) snapshot() (seq, pos uint64, ok bool) {
	seq = st.seq.Load()
	pos = st.pos.Load()
	return seq, pos, seq&1 == 0 && pos < movedPos
}

// unchanged reports whether no writer has run since snapshot returned seq:
// then what was read in between is one state.
func (st *slidingState) unchanged(seq uint64) bool { return st.seq.Load() == seq }

// lock takes st's lock, waiting while another writer holds it, and returns
// the value to give unlock.
func (st *slidingState) lock() uint64 {
	var w holderWait
	for {
		seq := st.seq.Load()
		if seq&1 == 0 && st.seq.CompareAndSwap(seq, seq+1) {
			return seq + 2
		}
		w.wait(&st.seq, seq)
	}
}

// unlock releases st's lock, and wakes the callers parked waiting for it
// (see holderWait): next is what lock returned.
func (st *slidingState) unlock(next uint64) {
	if st.release(next) {
		unpark(&st.seq)
	}
}

// release is unlock but the wake: it releases st's lock with next and
// reports whether a caller may be parked waiting for it, to unpark. Apart,
// so that an admission, whose unlock would be a call (too large to
// inline), releases without one.
func (st *slidingState) release(next uint64) bool {
	st.seq.Store(next)
	return parked(&st.seq)
}

// append records n admissions at t in the log at pos. The caller holds the
// lock (see seq).
func (st *slidingState) append(pos uint64, t int64, n int) {
	head, _, size := unpackPos(pos)
	events := len(st.log)
	for range n {
		st.log[head].Store(t)
		if head++; head == events {
			head = 0
		}
	}
	st.pos.Store(packPos(head, 0, min(size+n, events))) // forgets the phantoms (see pos)
}

// appendOne is append for n == 1, apart (and reading pos as fitsOne does)
// so that it inlines in decide: append's loop does not, 19 instructions a
// call more.
func (st *slidingState) appendOne(pos uint64, t int64) {
	head, size := int(pos>>32), int(pos&(1<<16-1))
	st.log[head].Store(t)
	if head++; head == len(st.log) {
		head = 0
	}
	st.pos.Store(packPos(head, 0, min(size+1, len(st.log))))
}

// retire retires st whatever its log (Reset), unless a change of limit
// moved it first (see resetKey).
func (st *slidingState) retire() bool {
	defer st.unlock(st.lock())
	if st.pos.Load() == movedPos {
		return false
	}
	st.pos.Store(retiredPos)
	return true
}

// retireIfIdle retires st if its newest admission has left the window at
// now: the log is then indistinguishable from a new key's. The decision and
// the retirement are made under st's lock, so an admission either lands
// before (and st is not idle) or meets the retired state and starts over.
// Otherwise it returns when st could be idle. A state under a stale limit
// is judged under its own: it never changes limit in place.
func (st *slidingState) retireIfIdle(now int64) (bool, int64) {
	defer st.unlock(st.lock())
	pos := st.pos.Load()
	if pos >= movedPos {
		return false, now // being removed by Reset, or moved
	}
	head, _, size := unpackPos(pos)
	if size == 0 {
		st.pos.Store(retiredPos)
		return true, now
	}
	r := &st.cfg.arith
	at := st.log[(head-1+r.events)%r.events].Load() + r.period
	if at > now {
		return false, at
	}
	st.pos.Store(retiredPos)
	return true, at
}

// unpackPos and packPos read and make a pos. Each field is below 2^16:
// head and size are at most MaxSlidingWindowEvents, and so are phantoms
// plus size (a change of limit keeps their sum; an admission drops them).
func unpackPos(pos uint64) (head, phantoms, size int) {
	return int(pos >> 32), int(pos >> 16 & (1<<16 - 1)), int(pos & (1<<16 - 1))
}

func packPos(head, phantoms, size int) uint64 {
	return uint64(head)<<32 | uint64(phantoms)<<16 | uint64(size)
}

// resetKey is Reset.
func (s *SlidingWindow[K]) resetKey(key K) { resetKey(s.keys, key, (*slidingState).retire) }

// refundKey is Refund.
func (s *SlidingWindow[K]) refundKey(key K, a *Admission) {
	st, ok := a.state.(*slidingState)
	if !ok || !madeBy(a.By, s) || !s.keys.ofKey(key, a) {
		return
	}
	n, ok := a.claim()
	if !ok || n <= 0 {
		return
	}
	for !st.refund(a.Mark, n) {
		// Moved by a change of limit: the entries went along, at the same
		// times, unless a Reset came between.
		if s.keys.resets.Load() != a.epoch {
			return
		}
		next := s.keys.load(key)
		if next == nil {
			return // evicted once idle under its new limit
		}
		if next == st {
			runtime.Gosched() // the map shows the new state in a moment
		}
		st = next
	}
}

// refund removes up to n entries of time t from st's log. It reports false
// if st was moved, and its entries with it.
func (st *slidingState) refund(t int64, n int) bool {
	defer st.unlock(st.lock())
	pos := st.pos.Load()
	switch pos {
	case movedPos:
		return false
	case retiredPos:
		return true
	}
	head, phantoms, size := unpackPos(pos)
	events := len(st.log)
	at := func(i int) *atomic.Int64 { return &st.log[(head-size+i+events)%events] } // the i-th oldest
	// The entries of time t are a run in the time-ordered log: the last one
	// is the last entry not after t.
	last := sort.Search(size, func(i int) bool { return at(i).Load() > t }) - 1
	k := 0
	for k < n && last-k >= 0 && at(last-k).Load() == t {
		k++
	}
	if k == 0 {
		return true
	}
	for i := last + 1; i < size; i++ { // the newer entries close the gap
		at(i - k).Store(at(i).Load())
	}
	head, size = (head-k+events)%events, size-k
	if phantoms > 0 {
		// A log with phantoms was full, and must stay so (see pos): they
		// take the freed slots, before the oldest entry, at its time.
		oldest := (head - size + events) % events
		first := st.log[oldest].Load()
		fill := min(k, phantoms)
		for i := 1; i <= fill; i++ {
			st.log[(oldest-i+events)%events].Store(first)
		}
		phantoms -= fill
		size += fill
	}
	st.pos.Store(packPos(head, phantoms, size))
	return true
}

// stats is Stats.
func (s *SlidingWindow[K]) stats() Stats { return s.keys.stats() }

// timers is the clock the limiter reads: WithClock's, or the system clock.
func (s *SlidingWindow[K]) timers() clock.Clock { return s.keys.clock.timers }

// stop stops the evictor.
func (s *SlidingWindow[K]) stop() { s.evictor.close() }

// waitKey is WaitN: it polls (see Keyed.WaitN).
func (s *SlidingWindow[K]) waitKey(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, s, s.timers(), key, n)
}

// limits is the limiter's policy, for its Keyed.
func (s *SlidingWindow[K]) limits() keyLimits[K] { return s.policy }
