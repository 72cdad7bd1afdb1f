package keylimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/compose"
)

// Ban says when a Penalty bans a key and for how long: a key its limiter
// refused Refusals times within Within is refused outright For.
type Ban struct {
	// Refusals is how many refusals start a ban: at least 1, at most
	// MaxBanRefusals.
	Refusals int
	// Within is the span the refusals must fall in: a ban starts at a
	// refusal when the Refusals-th latest one, this one included, came
	// less than Within ago.
	Within time.Duration
	// For is how long a ban lasts, from the refusal that started it.
	For time.Duration
}

// MaxBanRefusals is the most refusals a Ban may count: a key with
// refusals to count keeps the times of its last Ban.Refusals, 8 bytes each.
const MaxBanRefusals = 1 << 16

// validate reports what is wrong with b, or nil. NewPenalty calls it; the
// Redis penalties of the redislimit module learn it from NewPenalty.
func (b Ban) validate() error {
	switch {
	case b.Refusals < 1:
		return fmt.Errorf("keylimit: a ban's refusals %d is below 1", b.Refusals)
	case b.Refusals > MaxBanRefusals:
		return fmt.Errorf("keylimit: a ban's refusals %d is above %d", b.Refusals, MaxBanRefusals)
	case b.Within <= 0:
		return fmt.Errorf("keylimit: a ban's span (Within) %v is not positive", b.Within)
	case b.For <= 0:
		return fmt.Errorf("keylimit: a ban's length (For) %v is not positive", b.For)
	}
	return nil
}

// Penalty wraps a limiter and bans the keys that keep asking after their
// refusals: a key its limiter refused Ban.Refusals times within Ban.Within
// is refused outright for Ban.For, answered in process without asking the
// limiter (a Redis limiter makes no call), with Result.Banned set and
// RetryAfter, RefillAfter and ResetAfter at the ban's end.
//
// A ban never makes a decision looser than the limiter's: a banned key is
// refused, and any other gets exactly the limiter's answer. Only refusals
// that a later call can pass count (not a request that can never pass, a
// key the limiter could not track, or one whose limit it could not apply).
// The refusal that starts a ban is answered with the limiter's Result,
// Banned and with RetryAfter at the ban's end.
//
// The penalty keeps a state only for keys refused within Ban.Within or
// banned, and forgets it once both have passed (see WithEvictionInterval);
// WithMaxKeys bounds them: at the cap, a key without a state that cannot
// be made room for is decided by the limiter alone, and is not banned.
// Waiters (Wait, WaitN) wait out a ban, then wait by the limiter; their
// waits are not refusals and never count toward a ban.
//
// Its methods are safe for concurrent use. A key not banned costs a map
// lookup more than the limiter's own decision; a banned one a lookup and
// a clock read. NewPenalty keeps the bans in process; redislimit's
// NewPenalty returns a Penalty whose refusals and bans are kept on Redis,
// shared by a fleet, and says how it differs.
type Penalty[K comparable] struct {
	inner Limiter[K]
	bans  banStore[K]
	// local is bans if they are in process, else nil: the decisions call
	// it directly, without an interface call (see banned).
	local *localBans[K]
	// viaTake is set for a limiter that is not in process: AllowN asks it
	// by Take, one call, not by AllowN and, after a refusal, Peek.
	viaTake bool
}

// banStore is where a Penalty keeps its bans and counts the refusals
// toward them: in process (localBans, below), or on Redis (redislimit's
// NewPenalty makes a Penalty with its own, through internal/compose).
type banStore[K comparable] interface {
	// Banned returns the Result of a refusal by key's ban, if key is
	// banned now; refuse counts the refusal in BanRefused.
	Banned(key K, refuse bool) (Result, bool)
	// Refused counts a refusal of key, by a limit of quota limit, that a
	// later call could pass, and returns how long key is banned after it,
	// if it is (by this refusal, or by another just before).
	Refused(ctx context.Context, key K, limit int) (left time.Duration, banned bool)
	// Forget forgets key's ban and refusals.
	Forget(key K)
	// AddStats sets the store's counts in st: Bans, BanRefused, and
	// Watched or the calls the store made.
	AddStats(st *Stats)
	// Timers is the clock a wait for a ban's end reads and sleeps on.
	Timers() clock.Clock
	// Close stops what the store runs.
	Close() error
}

// localBans keeps a Penalty's bans in process.
type localBans[K comparable] struct {
	ban  Ban
	keys *shard[K, penaltyState]
	// within and length are Ban.Within and Ban.For in ns, at most maxSpan.
	within, length int64
	evictor        *evictor
	bans           atomic.Uint64
	// banned counts the refusals by a ban, striped: a banned key is what a
	// flood asks for, from every CPU at once.
	banned *stripedCounts
}

// penaltyState is what a Penalty keeps of one key.
type penaltyState struct {
	// until is the end of the key's ban, in ns of the penalty's clock; at
	// or before now, the key is not banned. Written under mu, read by
	// every decision without it: the hot path takes no lock.
	until atomic.Int64

	mu sync.Mutex // protects the fields below
	// refusals is a ring of the times of the key's latest refusals, up to
	// Ban.Refusals; next is the slot the next one goes in, and count how
	// many it holds. A ban empties it: the refusals after it count afresh.
	refusals    []int64
	next, count int
	newest      int64 // the latest refusal's time, with count > 0
	retired     bool  // set by Reset and the evictor: the state is out of the map

	// limit is the limiter's Result.Limit at the refusal that started the
	// ban, which a ban's Result reports; written before until.
	limit atomic.Int64
}

// NewPenalty returns a Penalty that bans, by b, the keys inner refuses too
// often. It reads time from WithClock's clock, or else from inner's if
// inner has a clock of its own (every limiter of this module and of
// redislimit has), or else the system's. It takes WithClock, WithMaxKeys,
// WithEvictionInterval and WithLogger, and returns an error if b or an
// option is invalid. Close stops its evictor; inner is the caller's to
// close.
func NewPenalty[K comparable](inner Limiter[K], b Ban, opts ...Option) (*Penalty[K], error) {
	return newPenalty(inner, b, func() (banStore[K], error) {
		o, err := buildOptions(opts)
		if err != nil {
			return nil, err
		}
		if o.overflow == admitUntracked || o.stats {
			return nil, errors.New("keylimit: WithAdmitUntracked and WithStats are not options of a Penalty: its limiter decides and counts")
		}
		if o.clock == nil {
			if clk := clockOf(inner); clk != systemClock {
				o.clock = clk // else nil: the monotonic fast path
			}
		}
		return newLocalBans[K](b, o), nil
	})
}

// newPenalty returns a Penalty of inner that bans by b, keeping its bans
// in the store newBans makes once inner and b are found valid.
func newPenalty[K comparable](inner Limiter[K], b Ban, newBans func() (banStore[K], error)) (*Penalty[K], error) {
	if inner == nil {
		return nil, errors.New("keylimit: NewPenalty needs a limiter to wrap")
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	bans, err := newBans()
	if err != nil {
		return nil, err
	}
	p := &Penalty[K]{inner: inner, bans: bans, viaTake: placeOf(inner) == remote}
	p.local, _ = bans.(*localBans[K])
	return p, nil
}

// newLocalBans returns the store of a Penalty that bans by b in process,
// under o's clock, key cap and eviction.
func newLocalBans[K comparable](b Ban, o options) *localBans[K] {
	l := &localBans[K]{
		ban:    b,
		within: int64(min(b.Within, maxSpan)),
		length: int64(min(b.For, maxSpan)),
		banned: newStripedCounts(),
	}
	// The hooks hold within, not l: the evictor's goroutine holds them,
	// and l must stay collectable (see startEvictor).
	within := l.within
	l.keys = newShard(o, stateHooks[K, penaltyState]{
		newState: func(K) *penaltyState { return new(penaltyState) },
		retireIfIdle: func(st *penaltyState, now int64) (bool, int64) {
			return st.retireIfIdle(now, within)
		},
		retire: func(st *penaltyState) {
			st.mu.Lock()
			st.retired = true
			st.mu.Unlock()
		},
	})
	l.evictor = startEvictor(l, l.keys, o, time.Duration(max(l.within, l.length)))
	return l
}

// A Penalty reports the limiter it wraps to quota, which announces that
// limiter's window.
func init() {
	compose.RegisterInner(func(l any) (any, bool) {
		w, ok := l.(interface{ wrapped() any })
		if !ok {
			return nil, false
		}
		return w.wrapped(), true
	})
}

// redislimit's NewPenalty makes a Penalty on string keys whose bans are on
// Redis: its store implements banStore[string].
func init() {
	compose.NewPenalty = func(inner, ban any, newBans func() (any, error)) (any, error) {
		in, _ := inner.(Limiter[string])
		return newPenalty(in, ban.(Ban), func() (banStore[string], error) {
			bans, err := newBans()
			if err != nil {
				return nil, err
			}
			return bans.(banStore[string]), nil
		})
	}
}

// wrapped returns the limiter the penalty wraps.
func (p *Penalty[K]) wrapped() any { return p.inner }

// Allow is shorthand for AllowN(key, 1).
func (p *Penalty[K]) Allow(key K) bool { return p.AllowN(key, 1) }

// AllowN is Take(key, n).Allowed. It asks an in-process limiter by its
// AllowN, and only after a refusal by its Peek, for what a ban needs:
// whether the refusal counts, and the limit.
func (p *Penalty[K]) AllowN(key K, n int) bool {
	if p.viaTake {
		return p.Take(key, n).Allowed
	}
	if _, ok := p.banned(key, true); ok {
		return false
	}
	if p.inner.AllowN(key, n) {
		return true
	}
	r := p.inner.Peek(key)
	r.Allowed = false
	if n > r.Limit {
		r.RetryAfter = InfDuration
	}
	p.judge(context.Background(), key, r, nil)
	return false
}

// Take refuses n events for a banned key; for any other, it is the
// limiter's Take, whose refusal counts toward a ban.
func (p *Penalty[K]) Take(key K, n int) Result {
	r, _ := p.TakeContext(context.Background(), key, n)
	return r
}

// TakeContext is Take under ctx, which the limiter gets if it takes one
// (see ContextLimiter). A ctx that has ended makes no decision; the error
// is ctx's or the limiter's.
func (p *Penalty[K]) TakeContext(ctx context.Context, key K, n int) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if r, ok := p.banned(key, true); ok {
		return r, nil
	}
	r, err := takeContext(ctx, p.inner, key, n)
	return p.judge(ctx, key, r, err), err
}

// Admit is Take, and also returns the limiter's Admission, for Refund. A
// limiter that is not a Refunder gives a zero Admission: its events stay
// taken.
func (p *Penalty[K]) Admit(key K, n int) (Result, Admission) {
	r, a, _ := p.AdmitContext(context.Background(), key, n)
	return r, a
}

// AdmitContext is Admit under ctx, as TakeContext is Take.
func (p *Penalty[K]) AdmitContext(ctx context.Context, key K, n int) (Result, Admission, error) {
	return p.admit(ctx, key, n, false)
}

// admitPart is AdmitContext for All, without the once of an in-memory
// limiter's Admission (see partAdmitter).
func (p *Penalty[K]) admitPart(ctx context.Context, key K, n int) (Result, Admission, error) {
	return p.admit(ctx, key, n, true)
}

// admit is AdmitContext, and admitPart if part is set.
func (p *Penalty[K]) admit(ctx context.Context, key K, n int, part bool) (Result, Admission, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, Admission{}, err
	}
	if r, ok := p.banned(key, true); ok {
		return r, Admission{}, nil
	}
	rf, ok := p.inner.(Refunder[K])
	if !ok {
		r, err := takeContext(ctx, p.inner, key, n)
		return p.judge(ctx, key, r, err), Admission{}, err
	}
	if part {
		if pa := partOf[K](p.inner); pa != nil {
			r, a, err := pa.admitPart(ctx, key, n)
			return p.judge(ctx, key, r, err), a, err
		}
	}
	r, a, err := admitContext(ctx, rf, key, n)
	return p.judge(ctx, key, r, err), a, err
}

// Refund gives a, an Admission of the limiter's, back to the limiter. A
// refund lifts no ban.
func (p *Penalty[K]) Refund(key K, a Admission) {
	if rf, ok := p.inner.(Refunder[K]); ok {
		rf.Refund(key, a)
	}
}

// RefundContext is Refund under ctx, for a limiter that takes one; the
// error is its RefundContext's.
func (p *Penalty[K]) RefundContext(ctx context.Context, key K, a Admission) error {
	switch rf := p.inner.(type) {
	case contextRefunder[K]:
		return rf.RefundContext(ctx, key, a)
	case Refunder[K]:
		rf.Refund(key, a)
	}
	return nil
}

// Peek reports a banned key's ban, and any other's state by the limiter's
// Peek. It counts nothing.
func (p *Penalty[K]) Peek(key K) Result {
	if r, ok := p.bans.Banned(key, false); ok {
		return r
	}
	return p.inner.Peek(key)
}

// PeekContext is Peek under ctx, for a limiter that takes one; the error
// is its PeekContext's.
func (p *Penalty[K]) PeekContext(ctx context.Context, key K) (Result, error) {
	if r, ok := p.bans.Banned(key, false); ok {
		return r, nil
	}
	if c, ok := p.inner.(interface {
		PeekContext(ctx context.Context, key K) (Result, error)
	}); ok {
		return c.PeekContext(ctx, key)
	}
	return p.inner.Peek(key), nil
}

// Reset forgets key, in the limiter and in the penalty: its ban and its
// refusals.
func (p *Penalty[K]) Reset(key K) {
	p.bans.Forget(key)
	p.inner.Reset(key)
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (p *Penalty[K]) Wait(ctx context.Context, key K) error { return p.WaitN(ctx, key, 1) }

// WaitN waits out key's ban, if it is banned, then waits by the limiter
// (the package's WaitN). It fails at once, taking nothing, if the ban
// outlasts ctx's deadline (ErrWouldExceedDeadline).
func (p *Penalty[K]) WaitN(ctx context.Context, key K, n int) error {
	timers := p.bans.Timers()
	for {
		r, ok := p.bans.Banned(key, false)
		if !ok {
			return WaitN[K](ctx, p.inner, key, n)
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := deadline.Sub(timers.Now()); r.RetryAfter > left {
				return &deadlineError{n: n, wait: r.RetryAfter, left: max(left, 0)}
			}
		}
		if err := sleep(ctx, timers, r.RetryAfter); err != nil {
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
		}
	}
}

// timers is the clock the penalty reads.
func (p *Penalty[K]) timers() clock.Clock { return p.bans.Timers() }

// Stats returns the limiter's Stats, if it has a Stats method, with the
// penalty's Bans and BanRefused (added to Refused, if the limiter counts
// its decisions), and Watched, or, with bans on Redis, the calls to Redis
// added to the limiter's. Over an All, which has no Stats, Remote says
// whether one of its limiters' Stats say Remote.
func (p *Penalty[K]) Stats() Stats {
	var st Stats
	if s, ok := p.inner.(interface{ Stats() Stats }); ok {
		st = s.Stats()
	} else {
		st.Remote = placeOf(p.inner) == remote
	}
	p.bans.AddStats(&st)
	st.Penalty = true
	if st.Decisions {
		st.Refused += st.BanRefused
	}
	return st
}

// Close stops the penalty's evictor (with bans on Redis, its subscription
// to their announcements); it does not close the limiter. It returns nil,
// or the subscription's error.
func (p *Penalty[K]) Close() error { return p.bans.Close() }

// judge returns the limiter's answer r for key, and counts it toward a
// ban if it is a refusal a later call could pass; err is the limiter's.
func (p *Penalty[K]) judge(ctx context.Context, key K, r Result, err error) Result {
	if r.Allowed || err != nil || r.Untracked || r.Err != nil || r.RetryAfter == InfDuration {
		return r
	}
	var left time.Duration
	var ok bool
	if p.local != nil {
		left, ok = p.local.Refused(ctx, key, r.Limit)
	} else {
		left, ok = p.bans.Refused(ctx, key, r.Limit)
	}
	if !ok || left <= 0 {
		return r
	}
	r.RetryAfter = max(r.RetryAfter, left)
	r.ResetAfter = max(r.ResetAfter, left)
	r.RefillAfter = max(r.RefillAfter, left) // no quota until the ban ends
	r.Banned = true
	return r
}

// banned is p.bans.Banned, without an interface call for bans in process.
func (p *Penalty[K]) banned(key K, refuse bool) (Result, bool) {
	if p.local != nil {
		return p.local.Banned(key, refuse)
	}
	return p.bans.Banned(key, refuse)
}

// Banned is the refusal by key's ban, if key is banned now (see banStore).
func (l *localBans[K]) Banned(key K, refuse bool) (Result, bool) {
	if l.keys.len() == 0 {
		return Result{}, false // no key refused lately: no hash
	}
	st := l.keys.load(key)
	if st == nil {
		return Result{}, false
	}
	until := st.until.Load()
	if until == 0 {
		return Result{}, false
	}
	now := l.keys.clock.now()
	if until <= now {
		return Result{}, false
	}
	if refuse {
		l.banned.add(false)
	}
	left := time.Duration(until - now)
	return Result{Limit: int(st.limit.Load()), RetryAfter: left, ResetAfter: left, RefillAfter: left, Banned: true}, true
}

// Refused records a refusal of key (see banStore).
func (l *localBans[K]) Refused(_ context.Context, key K, limit int) (time.Duration, bool) {
	// The clock is read after the limiter decided: its call may have
	// taken a round trip, and the refusal happened at its end.
	now := l.keys.clock.now()
	until, ok := l.refusal(key, limit, now)
	if !ok {
		return 0, false
	}
	return time.Duration(until - now), true
}

// Forget forgets key's ban and refusals.
func (l *localBans[K]) Forget(key K) { l.keys.reset(key) }

// AddStats sets Bans, BanRefused and Watched in st.
func (l *localBans[K]) AddStats(st *Stats) {
	_, st.BanRefused = l.banned.sum()
	st.Bans = l.bans.Load()
	st.Watched = l.keys.len()
}

// Timers is the clock the bans are on.
func (l *localBans[K]) Timers() clock.Clock { return l.keys.clock.timers }

// Close stops the evictor; it returns nil.
func (l *localBans[K]) Close() error {
	l.evictor.close()
	return nil
}

// refusal records a refusal of key at now, by a limit of quota limit, and
// returns the end of the key's ban if it is banned after it (by this
// refusal, or by another just before). A key the cap leaves no state for
// is not banned.
func (l *localBans[K]) refusal(key K, limit int, now int64) (until int64, banned bool) {
	st := l.keys.loadOrCreate(key)
	for st != nil {
		st.mu.Lock()
		if !st.retired {
			break
		}
		st.mu.Unlock()
		st = l.keys.replace(key, st)
	}
	if st == nil {
		return 0, false
	}
	defer st.mu.Unlock()
	if until := st.until.Load(); until > now {
		return until, true
	}
	if st.refusals == nil {
		st.refusals = make([]int64, l.ban.Refusals)
	}
	// Refusals are kept in time order: one that read the clock before the
	// latest, and took the lock after it, counts as at the latest's time.
	now = max(now, st.newest)
	m := len(st.refusals)
	st.refusals[st.next] = now
	st.next = (st.next + 1) % m
	st.count = min(st.count+1, m)
	st.newest = now
	// With the ring full, its oldest slot is next: the m-th latest refusal.
	if st.count < m || now-st.refusals[st.next%m] >= l.within {
		return 0, false
	}
	// A ban that would end at 0, "never banned", ends a moment later.
	until = now + l.length
	if until == 0 {
		until = 1
	}
	st.limit.Store(int64(limit))
	st.count, st.next = 0, 0
	st.until.Store(until)
	l.bans.Add(1)
	return until, true
}

// retireIfIdle retires st if it holds no ban and no refusal that still
// counts at now, refusals counting for within ns (see stateHooks).
func (st *penaltyState) retireIfIdle(now, within int64) (bool, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	idleAt := st.until.Load()
	if st.count > 0 {
		idleAt = max(idleAt, st.newest+within)
	}
	if idleAt > now {
		return false, idleAt
	}
	st.retired = true
	return true, 0
}

var (
	_ ContextLimiter[string] = (*Penalty[string])(nil)
)
