package keylimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// MaxSlidingWindowEvents is the largest Limit.Events a SlidingWindow accepts:
// it keeps 8 bytes per event of the quota for every active key, 80 KB at this
// cap. For larger quotas use a SlidingCounter, whose key costs 8 bytes
// whatever the quota.
const MaxSlidingWindowEvents = 10_000

// SlidingWindow limits each key exactly to Limit.Events in any interval of
// length Limit.Period: it admits n events at time t if and only if at most
// Events − n were admitted in (t − Period, t]. Unlike a FixedWindow, it
// has no boundary at which a client can pass twice its quota. Limit.Burst is
// ignored.
//
// It keeps a log of each key's last Events admission times, in a ring of
// 8 × Events bytes allocated on the key's first admission (so Events is
// capped at MaxSlidingWindowEvents). Deciding reads one entry: n events fit
// if the n-th oldest of the last Events admissions has left the window.
// Result.RetryAfter is when enough of the oldest entries leave for the
// request to fit; ResetAfter is when the newest leaves.
//
// # Concurrency
//
// An admission writes a log entry and moves the ring's head, two words that
// one compare-and-swap cannot update together, and the log must stay in time
// order for the one-entry test to be exact. So admissions (and Refund, Reset
// and eviction) hold a small per-key mutex, which also keeps every decision
// exact under any number of goroutines. Everything that only reads — a
// refusal, Peek — takes no lock and writes nothing: it reads a snapshot
// of the log between two readings of a sequence counter that writers bump
// (a seqlock), and falls back to the lock only if a writer ran meanwhile.
// On the hot-path benchmarks (BenchmarkAllow), an admission on one key
// costs about 1.6 times a TokenBucket's serially and 3 times with two CPUs
// contending for the key, whose admissions then queue on its lock; a
// refusal costs about what the bucket's does; across 10,000 keys the
// difference is within the noise of the map lookup.
// Allow allocates nothing after a key's first admission.
//
// If an injected clock steps back, the key decides at the time of its
// newest entry, and records there: entries newer than now still count, and
// a step back never reopens capacity.
type SlidingWindow[K comparable] struct {
	*keyed[K, slidingState]
	slidingRules
	limit   Limit
	evictor *evictor
}

// slidingRules is the arithmetic of one SlidingWindow's states; the
// evictor's hooks keep a copy, not the limiter.
type slidingRules struct {
	events int
	period int64
}

// slidingState is one key's log.
type slidingState struct {
	// mu is held by every writer of seq, pos and log: admissions, Refund and
	// retirement.
	mu sync.Mutex
	// seq is odd while a writer changes pos or log. A reader without mu reads
	// seq, then what it needs, then seq again: if seq was even and has not
	// changed, what it read is one consistent state.
	seq atomic.Uint64
	// pos is head<<32 | size: the last size admissions are in the size slots
	// before head (mod Events), oldest first. It is retiredPos once the state
	// is retired (Reset, the evictor), after which nothing writes it again
	// and callers look the key up afresh (keyed.replace).
	pos atomic.Uint64
	// log holds admission times in ns since the limiter's creation, in
	// nondecreasing order from the oldest slot to the newest: an admission
	// records max(now, newest entry), so time never goes back in the log.
	log []atomic.Int64
}

// retiredPos marks a retired state; a live pos has size <= Events < 2^32.
const retiredPos = ^uint64(0)

// NewSlidingWindow returns a SlidingWindow that admits at most l.Events per
// key in any interval of length l.Period. It returns an error if l or an
// option is invalid, or if l.Events is above MaxSlidingWindowEvents.
//
// The limiter forgets a key once its newest admission has left the window
// (see WithEvictionInterval and WithMaxKeys). Call Close when done with it to
// stop its evictor at once; a limiter dropped without Close stops it once
// the garbage collector finds it unreachable.
func NewSlidingWindow[K comparable](l Limit, opts ...Option) (*SlidingWindow[K], error) {
	if err := l.validateWindow(); err != nil {
		return nil, err
	}
	if l.Events > MaxSlidingWindowEvents {
		return nil, fmt.Errorf("keylimit: a SlidingWindow keeps at most %d events per key (8 bytes each), not %d: use a SlidingCounter for large quotas",
			MaxSlidingWindowEvents, l.Events)
	}
	o, err := buildOptions(opts)
	if err == nil {
		err = noKeyLimit(o, "SlidingWindow")
	}
	if err != nil {
		return nil, err
	}
	rules := slidingRules{events: l.Events, period: int64(l.Period)}
	s := &SlidingWindow[K]{
		keyed: newKeyed(o, stateHooks[K, slidingState]{
			newState: func(K) *slidingState {
				return &slidingState{log: make([]atomic.Int64, rules.events)}
			},
			retireIfIdle: rules.retireIfIdle,
			retire:       (*slidingState).retire,
		}),
		slidingRules: rules,
		limit:        l,
	}
	s.evictor = startEvictor(s, s.keyed, o, l.Period)
	return s, nil
}

// Limit returns the limit the window enforces.
func (s *SlidingWindow[K]) Limit() Limit { return s.limit }

// Allow reports whether one event for key may happen now, and records it if
// so. Allow is shorthand for AllowN(key, 1).
func (s *SlidingWindow[K]) Allow(key K) bool { return s.AllowN(key, 1) }

// AllowN reports whether n events for key may happen now, and records all n
// if so; otherwise it records nothing. AllowN is Take(key, n).Allowed without
// the work of filling in the rest of the Result.
func (s *SlidingWindow[K]) AllowN(key K, n int) bool {
	if n <= 0 || n > s.events {
		return n == 0
	}
	d := s.decide(key, n, false)
	return d.ok || (d.untracked && s.overflow == admitUntracked)
}

// Take records n events for key if all n fit in the window, and reports the
// decision and the window after it. A refused call changes nothing.
//
// n == 0 is always allowed and records nothing. n < 0, or n above Events,
// can never pass: the Result is refused with RetryAfter InfDuration.
func (s *SlidingWindow[K]) Take(key K, n int) Result {
	if n <= 0 || n > s.events {
		return impossible(s.Peek(key), n)
	}
	d := s.decide(key, n, true)
	if d.untracked {
		return s.untracked(s.events, n)
	}
	return s.result(d)
}

// Peek reports the state of key's window now without recording anything:
// Allowed tells whether Allow(key) would pass, RetryAfter how long until it
// would. Peek does not create the key, and takes no lock unless a writer
// changes the key while it reads.
func (s *SlidingWindow[K]) Peek(key K) Result {
	now := s.clock.now()
	var d slidingDecision
	st := s.load(key)
	if st == nil {
		s.judge(nil, 0, now, 1, true, &d)
		return s.result(d)
	}
	for range 4 {
		if s.judgeSnapshot(st, now, 1, true, &d) {
			return s.result(d)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if pos := st.pos.Load(); pos != retiredPos {
		s.judge(st, pos, now, 1, true, &d)
	} else {
		s.judge(nil, 0, now, 1, true, &d)
	}
	return s.result(d)
}

// slidingDecision is a decision on n events and what Result needs of it.
type slidingDecision struct {
	ok bool
	// untracked is set if the key cap left no place for the key.
	untracked bool
	// now is the clock reading it was made at; t, the time it was made
	// for, max(now, the newest entry); newest, the newest entry after it,
	// if count > 0.
	now, t, newest int64
	// leave is when enough entries leave the window for the request to fit
	// (when refused).
	leave int64
	// count is how many entries are in the window at t, after the decision.
	count int
}

// decide records n (1 <= n <= Events) events for key if they fit. report
// asks for the count in the window, which Take needs and AllowN does not.
func (s *SlidingWindow[K]) decide(key K, n int, report bool) slidingDecision {
	st := s.loadOrCreate(key)
	// One clock reading serves the whole call. A decision under the lock
	// may then see admissions recorded after this reading; it is made at
	// max(now, the newest entry), a time within this call, on the log as
	// it is at that time: exact, and admissions still go in time order.
	now := s.clock.now()
	for {
		if st == nil {
			return slidingDecision{untracked: true}
		}
		// A refusal needs no lock: a consistent snapshot that refuses is
		// the state at one instant of this call. Only an admission locks.
		var d slidingDecision
		if s.judgeSnapshot(st, now, n, report, &d) && !d.ok {
			return d
		}
		st.mu.Lock()
		pos := st.pos.Load()
		if pos == retiredPos {
			st.mu.Unlock()
			st = s.replace(key, st)
			continue
		}
		s.judge(st, pos, now, n, report, &d)
		if d.ok {
			st.append(pos, d.t, n)
			d.count += n
			d.newest = d.t
		}
		st.mu.Unlock()
		return d
	}
}

// judge decides n events at now on the log of st at pos, without writing,
// into d. st == nil is a key never seen. (The decision goes through a
// pointer: returned by value through the layers above, its copies cost more
// than the decision.)
func (r *slidingRules) judge(st *slidingState, pos uint64, now int64, n int, report bool, d *slidingDecision) {
	head, size := unpackPos(pos)
	// entry returns the i-th oldest of the size entries.
	entry := func(i int) int64 {
		at := head - size + i // in [-events, events)
		if at < 0 {
			at += r.events
		}
		return st.log[at].Load()
	}
	*d = slidingDecision{now: now, t: now}
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
	if report {
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
	}
}

// result reports decision d as a Result.
func (r *slidingRules) result(d slidingDecision) Result {
	res := Result{Allowed: d.ok, Limit: r.events, Remaining: r.events - d.count}
	if d.count > 0 {
		res.ResetAfter = time.Duration(d.newest + r.period - d.now)
	}
	if !d.ok {
		res.RetryAfter = time.Duration(d.leave - d.now)
	}
	return res
}

// judgeSnapshot judges n events at now on st without its lock, into d, and
// reports whether d is one state's decision: false if a writer ran while it
// read (see slidingState.seq) or st is retired.
func (r *slidingRules) judgeSnapshot(st *slidingState, now int64, n int, report bool, d *slidingDecision) bool {
	seq, pos, ok := st.snapshot()
	if !ok {
		return false
	}
	r.judge(st, pos, now, n, report, d)
	return st.unchanged(seq)
}

// snapshot begins a read of st without its lock: it returns the sequence
// number to check with unchanged once done, and pos. ok is false if a
// writer is mid-way or st is retired.
func (st *slidingState) snapshot() (seq, pos uint64, ok bool) {
	seq = st.seq.Load()
	pos = st.pos.Load()
	return seq, pos, seq&1 == 0 && pos != retiredPos
}

// unchanged reports whether no writer has run since snapshot returned seq:
// then what was read in between is one state.
func (st *slidingState) unchanged(seq uint64) bool { return st.seq.Load() == seq }

// append records n admissions at t in the log at pos. The caller holds mu.
func (st *slidingState) append(pos uint64, t int64, n int) {
	head, size := unpackPos(pos)
	events := len(st.log)
	st.seq.Add(1)
	for range n {
		st.log[head].Store(t)
		if head++; head == events {
			head = 0
		}
	}
	st.pos.Store(packPos(head, min(size+n, events)))
	st.seq.Add(1)
}

// retire retires st whatever its log (Reset).
func (st *slidingState) retire() {
	st.mu.Lock()
	st.pos.Store(retiredPos)
	st.mu.Unlock()
}

// retireIfIdle retires st if its newest admission has left the window at
// now: the log is then indistinguishable from a new key's. The decision and
// the retirement are made under st's lock, so an admission either lands
// before (and st is not idle) or meets the retired state and starts over.
// Otherwise it returns when st could be idle.
func (r *slidingRules) retireIfIdle(st *slidingState, now int64) (bool, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	pos := st.pos.Load()
	if pos == retiredPos {
		return false, now // being removed by Reset
	}
	head, size := unpackPos(pos)
	if size == 0 {
		st.pos.Store(retiredPos)
		return true, now
	}
	at := st.log[(head-1+r.events)%r.events].Load() + r.period
	if at > now {
		return false, at
	}
	st.pos.Store(retiredPos)
	return true, at
}

func unpackPos(pos uint64) (head, size int) { return int(pos >> 32), int(pos & (1<<32 - 1)) }
func packPos(head, size int) uint64         { return uint64(head)<<32 | uint64(size) }

// Reset forgets key: its log is empty again. Admissions that race with Reset
// happen either wholly before it (and are forgotten) or after it.
func (s *SlidingWindow[K]) Reset(key K) { s.reset(key) }

// Refund gives back n events that Take or AllowN admitted for key, as if they
// had not been admitted: keylimit.All uses it to undo a partial admission. It
// removes the n newest entries of the key's log; if other admissions came
// between, theirs go instead, which can only make room earlier, never
// beyond the full quota. n <= 0 does nothing.
func (s *SlidingWindow[K]) Refund(key K, n int) {
	st := s.load(key)
	if st == nil || n <= 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	pos := st.pos.Load()
	if pos == retiredPos {
		return
	}
	// The entries that the refunded admissions pushed out of the ring had
	// left the window before them (an admission needs that), and time does
	// not go back in the log, so they need not come back.
	head, size := unpackPos(pos)
	k := min(n, size)
	st.seq.Add(1)
	st.pos.Store(packPos((head-k+s.events)%s.events, size-k))
	st.seq.Add(1)
}

// Len returns the number of keys the window tracks.
func (s *SlidingWindow[K]) Len() int { return s.len() }

// Close stops the window's evictor. The window still answers after Close,
// exactly, but no longer forgets idle keys in the background. It always
// returns nil.
func (s *SlidingWindow[K]) Close() error {
	s.evictor.close()
	return nil
}

// Wait blocks until one event for key may happen, records it and returns
// nil. Wait is shorthand for WaitN(ctx, key, 1).
func (s *SlidingWindow[K]) Wait(ctx context.Context, key K) error { return s.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and records them. It fails
// at once, recording nothing, if n can never pass (ErrExceedsLimit) or if the
// wait would outlast ctx's deadline; it returns ctx's error, wrapped, if ctx
// ends first. A failed wait records nothing.
func (s *SlidingWindow[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, s, &s.clock, key, n)
}
