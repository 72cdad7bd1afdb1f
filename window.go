package keylimit

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// windowGrid is the arithmetic of windows aligned to multiples of a period
// since the Unix epoch, in a limiter's time (ns since its creation, see
// timeSource). Windows are numbered from 1, the window that holds the
// earliest clamped time, so that 0 can mean "no window yet" and every window
// of a clamped time has a small positive index. The number is the limiter's
// own: what is aligned to the epoch is where windows start and end, so every
// instance (and the Redis backend) agrees on the boundaries.
type windowGrid struct {
	period int64
	// base is the start of window 1: the aligned boundary at or below the
	// earliest clamped time, -maxSpan. It lies less than a period below it.
	base int64
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
// unsigned division suffices.
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

// windowCountBits returns how many bits each of fields counters may take
// in a word that also holds a window index of period p: the rest of 64,
// once the largest index (and one more, so that an all-ones word is never a
// live state) fits. Clamped times span less than 3×2^60 ns, and the grid
// starts less than a period before them, so no index exceeds 3×2^60/p + 2.
func windowCountBits(p time.Duration, fields int) uint {
	maxIndex := uint64(3<<60)/uint64(p) + 2
	return uint(64-bits.Len64(maxIndex+1)) / uint(fields)
}

// checkWindowCounts reports an error if l.Events does not fit the bits a
// window limiter named name has for a count.
func checkWindowCounts(name string, l Limit, countBits uint, hint string) error {
	most := uint64(1)<<countBits - 1
	if uint64(l.Events) > most {
		return fmt.Errorf("keylimit: a %s counts at most %d events per %v, not %d%s", name, most, l.Period, l.Events, hint)
	}
	return nil
}

// FixedWindow limits each key to Limit.Events per window of Limit.Period. The
// windows are aligned to multiples of Period since the Unix epoch (a minute
// window runs from :00 to :00), as the Redis INCR and EXPIRE limiters and
// Envoy align theirs, so that every instance agrees on where a window starts,
// whenever it was created. Limit.Burst is ignored.
//
// Each key's state is one word, its window and the count admitted in it,
// updated by one compare-and-swap, beside a pointer to the limit it is
// under: Allow on an existing key is lock-free and allocates nothing, a
// refused call writes nothing, and the count is exact under any number of
// goroutines. A key costs 16 bytes of state.
//
// The known weakness of fixed windows is the boundary: a client may spend a
// window's quota just before its end and the next window's just after,
// so up to 2×Events pass within a moment. With PerMinute(10), 10 requests at
// 0:59.9 and 10 at 1:00.1 all pass. When that matters, use a SlidingWindow
// (exact) or a SlidingCounter (bounded memory); a FixedWindow never admits
// more than Events within one aligned window.
//
// Result.RetryAfter and ResetAfter are the time to the window's end;
// Remaining is Events minus the window's count. If an injected clock steps
// back into an earlier window than the key's, the key still decides as in
// its own window: a step back never reopens capacity.
//
// Each key can have its own limit (WithKeyLimit), and SetLimit changes
// limits while the window runs; a key keeps its count across the change.
type FixedWindow[K comparable] struct {
	*keyed[K, fixedState]
	policy  *policy[K, fixedRules] // not inline: the evictor holds it, and must not hold the window
	evictor *evictor
}

// fixedRules is the arithmetic of one FixedWindow limit. A key's word
// under it is window<<shift | count: window is the grid index of the window
// the key last admitted in (0, a new key's value, is none), count the
// events admitted in that window. Admissions move it to a later window or
// a greater count, never past Events; a change of limit may carry a count
// above the new Events (see SetLimit).
type fixedRules struct{ windowRules }

// windowRules is what the arithmetic of a FixedWindow or SlidingCounter
// limit holds.
type windowRules struct {
	grid   windowGrid
	events uint64
	shift  uint // bits of each count in a key's word
}

// newWindowRules checks l for a limiter type named name, whose key's word
// holds fields counts beside the window, and returns its arithmetic on the
// grid of a limiter created at startUnix. hint ends the error of an Events
// too large.
func newWindowRules(name string, l Limit, startUnix int64, fields int, hint string) (windowRules, error) {
	if err := l.validateWindow(); err != nil {
		return windowRules{}, err
	}
	shift := windowCountBits(l.Period, fields)
	if err := checkWindowCounts(name, l, shift, hint); err != nil {
		return windowRules{}, err
	}
	return windowRules{grid: newWindowGrid(l.Period, startUnix), events: uint64(l.Events), shift: shift}, nil
}

// newFixedRules checks l for a FixedWindow and returns its arithmetic, on
// the grid of a limiter created at startUnix.
func newFixedRules(l Limit, startUnix int64) (fixedRules, error) {
	r, err := newWindowRules("FixedWindow", l, startUnix, 1, "")
	return fixedRules{r}, err
}

// fixedState is one key's state in a FixedWindow.
type fixedState = wordState[fixedRules]

// wordState is one key's state in a FixedWindow or a SlidingCounter: one
// packed word, under one limit for the state's whole life.
type wordState[C wordRules[C]] struct {
	// word is the key's window and counts, packed as cfg's rules say.
	// Admissions write it, by CAS from the value they read; Refund lowers
	// the counts by CAS. Two sentinels end a state's life, after which
	// nothing writes it again and callers look the key up afresh
	// (keyed.replace): retiredWord (Reset, the evictor) and movedWord (a
	// change of limit moved the key to a new state, see moveKey).
	word atomic.Uint64
	cfg  *keyConfig[C]
}

// The sentinels of wordState. A live word never has all its window bits
// set (see windowCountBits).
const (
	retiredWord = ^uint64(0)
	movedWord   = ^uint64(1)
)

// wordRules is the arithmetic of a limit whose keys' states are one word
// (fixedRules, counterRules), as far as wordState needs it. The hot path
// calls its types' methods directly, not through this interface.
type wordRules[C any] interface {
	// carry returns the word under the limit to that holds what word holds
	// under this one, at now (see each type's SetLimit).
	carry(word uint64, to *C, now int64) uint64
	// idleAt returns the earliest time at which a state holding word is
	// indistinguishable from a new key's.
	idleAt(word uint64) int64
	// refund returns word with up to n admitted events given back, or
	// false if it has none to give.
	refund(word uint64, n int) (uint64, bool)
}

// moveTo is moveKey's carry for a wordState: it retires st as moved and
// returns a state under c holding what st holds. A state idle at now, which
// the evictor could have forgotten, moves as a new key's, so that eviction
// changes no decision after a change of limit either.
func (st *wordState[C]) moveTo(c *keyConfig[C], now int64) (*wordState[C], bool) {
	nu := &wordState[C]{cfg: c}
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

// settleWord returns the state to go on with when st, key's state, which
// held old, cannot decide: old was a sentinel (st's replacement), or st is
// under a stale limit (the state it moves to). It returns nil if the key
// can no longer be tracked.
func settleWord[K comparable, C wordRules[C]](k *keyed[K, wordState[C]], p *policy[K, C], key K, st *wordState[C], old uint64) *wordState[C] {
	if old >= movedWord {
		return k.replace(key, st)
	}
	if st = moveKey(k, p, key, st, (*wordState[C]).moveTo); st == nil {
		st = k.loadOrCreate(key)
	}
	return st
}

// observeWord returns key's word and the limit it is under, or 0 (empty)
// and the key's limit for a key not tracked. A state under a stale limit is
// moved to the current one first.
func observeWord[K comparable, C wordRules[C]](k *keyed[K, wordState[C]], p *policy[K, C], key K) (uint64, *keyConfig[C]) {
	for {
		st := k.load(key)
		if st == nil {
			return 0, p.resolve(key)
		}
		word := st.word.Load()
		switch {
		case word == retiredWord:
			return 0, p.resolve(key)
		case word == movedWord:
			runtime.Gosched() // the map shows the new state in a moment
			continue
		case st.cfg.stale():
			moveKey(k, p, key, st, (*wordState[C]).moveTo)
			continue
		}
		return word, st.cfg
	}
}

// retire retires st whatever it holds, unless a change of limit moved it
// first (see resetKey).
func (st *wordState[C]) retire() bool {
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
func (st *wordState[C]) retireIfIdle(now int64) (bool, int64) {
	word := st.word.Load()
	if word >= movedWord {
		return false, now // being removed by Reset, or moved
	}
	at := st.cfg.arith.idleAt(word)
	return at <= now && st.word.CompareAndSwap(word, retiredWord), at
}

// refundWord gives back n events admitted for key (see Refund), following
// the key to its new state if a change of limit moves it meanwhile.
func refundWord[K comparable, C wordRules[C]](k *keyed[K, wordState[C]], key K, n int) {
	if n <= 0 {
		return
	}
	for st := k.load(key); st != nil; {
		old := st.word.Load()
		switch old {
		case retiredWord:
			return
		case movedWord:
			runtime.Gosched() // the map shows the new state in a moment
			st = k.load(key)
			continue
		}
		word, ok := st.cfg.arith.refund(old, n)
		if !ok || st.word.CompareAndSwap(old, word) {
			return
		}
	}
}

// NewFixedWindow returns a FixedWindow that admits l.Events per key in each
// window of l.Period. It returns an error if l or an option is invalid, or if
// l.Events does not fit the count beside the window's index in the key's
// word: the most is 2^32 − 1 events in a window of a second, 3 in a window of
// a nanosecond, more the longer the window.
//
// The limiter forgets a key once its window has ended (see
// WithEvictionInterval and WithMaxKeys). Call Close when done with it to stop
// its evictor at once; a limiter dropped without Close stops it once the
// garbage collector finds it unreachable.
func NewFixedWindow[K comparable](l Limit, opts ...Option) (*FixedWindow[K], error) {
	// The limit is checked before the options (its grid, built below,
	// needs the clock the options give).
	if _, err := newFixedRules(l, 0); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	pol := new(policy[K, fixedRules])
	f := &FixedWindow[K]{policy: pol}
	f.keyed = newKeyed(o, stateHooks[K, fixedState]{
		newState:     func(key K) *fixedState { return &fixedState{cfg: pol.resolve(key)} },
		retireIfIdle: (*fixedState).retireIfIdle,
		retire:       func(st *fixedState) { st.retire() },
	})
	// The grids align to the clock's reading at creation, known only now.
	start := f.clock.startUnix
	if err := pol.init(l, o, func(l Limit) (fixedRules, error) { return newFixedRules(l, start) }); err != nil {
		return nil, err
	}
	f.evictor = startEvictor(f, f.keyed, o, l.Period)
	return f, nil
}

// Limit returns the window's limit: the one it was made with, or the last
// one SetLimit set. Keys given their own by WithKeyLimit are not under it.
func (f *FixedWindow[K]) Limit() Limit { return f.policy.limit() }

// SetLimit makes l the window's limit, and has every key resolve its limit
// again (WithKeyLimit's function is asked anew), each from its next call.
// It returns an error, and changes nothing, if l is invalid.
//
// A key keeps the count of its current window. Under a lowered limit the
// count may exceed Events: the key is then refused until its window ends.
// Under a raised one it has the difference at once. A new Period moves the
// windows: the key moves to the new window that holds now, with its count
// if its old window has not ended (those events may lie in the new
// window). A key whose window has ended is idle, and starts afresh: as it
// would, had the limiter forgotten it (see WithEvictionInterval), so
// eviction never changes a decision across a change either.
//
// So a change of limit never creates capacity. With one Period, a key
// admits at most the larger Events in any aligned window, however often
// the limit changes. With several Periods, over any interval a key admits
// at most the larger Events times one more than the number of window
// boundaries, of any of the limits' grids, inside the interval (as one
// FixedWindow admits at most Events times that, of its own grid): a count
// runs from one boundary to a later one. That is looser than either limit:
// flipped every minute between 100 an hour and 10 a minute, a key can pass
// about 100 a minute, as the hour's count does not outlast the minute it
// moved into, nor the minute's count know the earlier minutes of the hour.
// A change of Period is for an operator to make now and then; to hold a key
// to two limits at once, use All. (Counts are kept whole unless a change to
// a much shorter Period leaves them fewer bits than they need: they then
// saturate, which still refuses the whole window.) Admissions racing with
// SetLimit are decided under one limit or the other, never a mix.
func (f *FixedWindow[K]) SetLimit(l Limit) error { return f.policy.set(l) }

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (f *FixedWindow[K]) Allow(key K) bool { return f.AllowN(key, 1) }

// AllowN reports whether n events for key may happen now, and counts all n if
// so; otherwise it counts nothing. AllowN is Take(key, n).Allowed without the
// work of filling in the rest of the Result.
func (f *FixedWindow[K]) AllowN(key K, n int) bool {
	if n <= 0 {
		return n == 0
	}
	_, v, _, _, _ := f.decide(key, n)
	return v == admitted || (v == untracked && f.overflow == admitUntracked)
}

// Take counts n events for key in the current window if all n fit, and
// reports the decision and the window after it. A refused call changes
// nothing.
//
// n == 0 is always allowed and counts nothing. n < 0, or n above Events, can
// never pass: the Result is refused with RetryAfter InfDuration.
func (f *FixedWindow[K]) Take(key K, n int) Result {
	if n <= 0 {
		return impossible(f.Peek(key), n)
	}
	c, v, now, w, count := f.decide(key, n)
	switch v {
	case untracked:
		return f.untracked(int(c.arith.events), n)
	case never:
		return impossible(f.Peek(key), n)
	}
	return c.arith.result(v == admitted, now, w, count)
}

// decide counts n >= 1 events for key if they fit. It returns the limit the
// decision was made under, the verdict, the time it was made at, the window
// it was made in and the count there after it.
func (f *FixedWindow[K]) decide(key K, n int) (c *keyConfig[fixedRules], v verdict, now int64, w, count uint64) {
	st := f.load(key)
	if st == nil {
		// A request that can never pass must not create the key.
		if c = f.policy.resolve(key); c.err != nil || uint64(n) > c.arith.events {
			return c, never, 0, 0, 0
		}
		st = f.loadOrCreate(key)
	}
	for {
		if st == nil {
			return f.policy.resolve(key), untracked, 0, 0, 0
		}
		// The clock is read inside the loop: a retry after a lost CAS must
		// not decide on a time older than the window it lost to.
		now = f.clock.now()
		old := st.word.Load()
		c = st.cfg
		if old >= movedWord || c.stale() {
			st = settleWord(f.keyed, f.policy, key, st, old)
			continue
		}
		r := &c.arith
		if c.err != nil || uint64(n) > r.events {
			return c, never, 0, 0, 0
		}
		w, count = r.at(old, now)
		if count+uint64(n) > r.events {
			return c, refused, now, w, count
		}
		if st.word.CompareAndSwap(old, w<<r.shift|(count+uint64(n))) {
			return c, admitted, now, w, count + uint64(n)
		}
	}
}

// carry returns the word under the limit to that holds what word, not idle
// at now, holds under r (see SetLimit): the window of to that holds now (or
// the start of word's window, if the clock stepped back before it), with
// word's count, whose window has not ended.
func (r fixedRules) carry(word uint64, to *fixedRules, now int64) uint64 {
	w, count := r.at(word, now)
	return to.grid.index(max(now, r.grid.start(w)))<<to.shift | saturate(count, to.shift)
}

// saturate returns count, or the most a field of bits holds if less.
func saturate(count uint64, bits uint) uint64 { return min(count, 1<<bits-1) }

// at returns the window in which a state holding word decides at now, and
// the count there: the word's own count if that is still its window, 0 if a
// later window has begun.
func (r *fixedRules) at(word uint64, now int64) (w, count uint64) {
	last := word >> r.shift
	if w = r.grid.current(last, now); w == last {
		return w, word & (1<<r.shift - 1)
	}
	return w, 0
}

// result reports a decision made at now in window w, with count events in w
// after it.
func (r *fixedRules) result(ok bool, now int64, w, count uint64) Result {
	res := Result{Allowed: ok, Limit: int(r.events), Remaining: int(r.events - min(count, r.events))}
	left := time.Duration(r.grid.end(w) - now)
	if count > 0 {
		res.ResetAfter = left
	}
	if !ok {
		res.RetryAfter = left
	}
	return res
}

// Peek reports the state of key's window now without counting anything:
// Allowed tells whether Allow(key) would pass, RetryAfter how long until it
// would. Peek does not create the key.
func (f *FixedWindow[K]) Peek(key K) Result {
	now := f.clock.now()
	word, c := observeWord(f.keyed, f.policy, key)
	if c.err != nil {
		return Result{RetryAfter: InfDuration, Err: c.err}
	}
	r := &c.arith
	w, count := r.at(word, now)
	return r.result(count < r.events, now, w, count)
}

// Reset forgets key: its window is empty again. Admissions that race with
// Reset happen either wholly before it (and are forgotten) or after it.
func (f *FixedWindow[K]) Reset(key K) { resetKey(f.keyed, key, (*fixedState).retire) }

// Refund gives back n events that Take or AllowN admitted for key, as if they
// had not been admitted: keylimit.All uses it to undo a partial admission. It
// lowers the count of the key's window, never below 0; events admitted in a
// window that has ended are gone already. n <= 0 does nothing.
func (f *FixedWindow[K]) Refund(key K, n int) { refundWord(f.keyed, key, n) }

// refund lowers the count of word by n, never below 0.
func (r fixedRules) refund(word uint64, n int) (uint64, bool) {
	count := word & (1<<r.shift - 1)
	if count == 0 {
		return word, false
	}
	return word - min(uint64(n), count), true
}

// Len returns the number of keys the window tracks.
func (f *FixedWindow[K]) Len() int { return f.len() }

// Close stops the window's evictor. The window still answers after Close,
// exactly, but no longer forgets idle keys in the background. It always
// returns nil.
func (f *FixedWindow[K]) Close() error {
	f.evictor.close()
	return nil
}

// Wait blocks until one event for key may happen, counts it and returns nil.
// Wait is shorthand for WaitN(ctx, key, 1).
func (f *FixedWindow[K]) Wait(ctx context.Context, key K) error { return f.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and counts them. It fails
// at once, counting nothing, if n can never pass (ErrExceedsLimit) or if the
// wait would outlast ctx's deadline; it returns ctx's error, wrapped, if ctx
// ends first. A failed wait counts nothing.
func (f *FixedWindow[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, f, &f.clock, key, n)
}

// idleAt returns the earliest time at which a state holding word is
// indistinguishable from a new key's: when its window ends if it counted
// events there, else when its window starts (a clock that stepped back
// before it must not forget that time had reached it).
func (r fixedRules) idleAt(word uint64) int64 {
	w := word >> r.shift
	switch {
	case w == 0:
		return minTime
	case word&(1<<r.shift-1) > 0:
		return r.grid.end(w)
	default:
		return r.grid.start(w)
	}
}

// impossible answers a Take that needs no CAS, from a Peek of the key: n == 0
// (allowed, takes nothing) and n that can never pass.
func impossible(r Result, n int) Result {
	r.Allowed = n == 0
	r.RetryAfter = 0
	if n != 0 {
		r.RetryAfter = InfDuration
	}
	return r
}
