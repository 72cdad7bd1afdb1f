package keylimit

import (
	"context"
	"fmt"
	"math/bits"
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

// noKeyLimit reports WithKeyLimit given to a limiter type named name that
// has no per-key limits: they would be ignored.
func noKeyLimit(o options, name string) error {
	if o.keyLimit != nil {
		return fmt.Errorf("keylimit: WithKeyLimit is not supported by a %s, only by a TokenBucket", name)
	}
	return nil
}

// FixedWindow limits each key to Limit.Events per window of Limit.Period. The
// windows are aligned to multiples of Period since the Unix epoch (a minute
// window runs from :00 to :00), as the Redis INCR and EXPIRE limiters and
// Envoy align theirs, so that every instance agrees on where a window starts,
// whenever it was created. Limit.Burst is ignored.
//
// Each key's whole state is one word, its window and the count admitted in
// it, updated by one compare-and-swap: Allow on an existing key is
// lock-free and allocates nothing, a refused call writes nothing, and the
// count is exact under any number of goroutines. A key costs 8 bytes of
// state.
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
type FixedWindow[K comparable] struct {
	*keyed[K, fixedState]
	fixedRules
	limit   Limit
	evictor *evictor
}

// fixedRules is the arithmetic of one FixedWindow's states. The evictor's
// hooks keep a copy of their own, so that they hold no reference to the
// limiter (see startEvictor).
type fixedRules struct {
	grid   windowGrid
	events uint64
	shift  uint // bits of the count in fixedState.word
}

// fixedState is one key's state.
type fixedState struct {
	// word is window<<shift | count: window is the grid index of the window
	// the key last admitted in (0, a new key's value, is none), count the
	// events admitted in that window, at most Events. Admissions write it,
	// by CAS from the value they read, moving it to a later window or a
	// greater count; Refund lowers the count by CAS. Retirement (Reset, the
	// evictor) swaps in retiredWord, after which nothing writes it again and
	// callers look the key up afresh (keyed.replace).
	word atomic.Uint64
}

// retiredWord marks a state that has left, or is leaving, the map. A live
// word never has all its window bits set (see windowCountBits).
const retiredWord = ^uint64(0)

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
	if err := l.validateWindow(); err != nil {
		return nil, err
	}
	shift := windowCountBits(l.Period, 1)
	if err := checkWindowCounts("FixedWindow", l, shift, ""); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err == nil {
		err = noKeyLimit(o, "FixedWindow")
	}
	if err != nil {
		return nil, err
	}
	rules := &fixedRules{events: uint64(l.Events), shift: shift}
	f := &FixedWindow[K]{limit: l}
	f.keyed = newKeyed(o, stateHooks[K, fixedState]{
		newState:     func(K) *fixedState { return new(fixedState) },
		retireIfIdle: rules.retireIfIdle,
		retire:       func(st *fixedState) { st.word.Store(retiredWord) },
	})
	// The grid aligns to the clock's reading at creation, known only now.
	rules.grid = newWindowGrid(l.Period, f.clock.startUnix)
	f.fixedRules = *rules
	f.evictor = startEvictor(f, f.keyed, o, l.Period)
	return f, nil
}

// Limit returns the limit the window enforces.
func (f *FixedWindow[K]) Limit() Limit { return f.limit }

// Allow reports whether one event for key may happen now, and counts it if
// so. Allow is shorthand for AllowN(key, 1).
func (f *FixedWindow[K]) Allow(key K) bool { return f.AllowN(key, 1) }

// AllowN reports whether n events for key may happen now, and counts all n if
// so; otherwise it counts nothing. AllowN is Take(key, n).Allowed without the
// work of filling in the rest of the Result.
func (f *FixedWindow[K]) AllowN(key K, n int) bool {
	if n <= 0 || uint64(n) > f.events {
		return n == 0
	}
	v, _, _, _ := f.decide(key, n)
	return v == admitted || (v == untracked && f.overflow == admitUntracked)
}

// Take counts n events for key in the current window if all n fit, and
// reports the decision and the window after it. A refused call changes
// nothing.
//
// n == 0 is always allowed and counts nothing. n < 0, or n above Events, can
// never pass: the Result is refused with RetryAfter InfDuration.
func (f *FixedWindow[K]) Take(key K, n int) Result {
	if n <= 0 || uint64(n) > f.events {
		return impossible(f.Peek(key), n)
	}
	v, now, w, count := f.decide(key, n)
	if v == untracked {
		return f.untracked(int(f.events), n)
	}
	return f.result(v == admitted, now, w, count)
}

// decide counts n (1 <= n <= Events) events for key if they fit. It returns
// the verdict (admitted, refused, or untracked if the key cap left no place
// for the key), the time it was made at, the window it was made in and the
// count there after it.
func (f *FixedWindow[K]) decide(key K, n int) (v verdict, now int64, w, count uint64) {
	st := f.loadOrCreate(key)
	for {
		if st == nil {
			return untracked, 0, 0, 0
		}
		// The clock is read inside the loop: a retry after a lost CAS must
		// not decide on a time older than the window it lost to.
		now = f.clock.now()
		old := st.word.Load()
		if old == retiredWord {
			st = f.replace(key, st)
			continue
		}
		w, count = f.at(old, now)
		if count+uint64(n) > f.events {
			return refused, now, w, count
		}
		if st.word.CompareAndSwap(old, w<<f.shift|(count+uint64(n))) {
			return admitted, now, w, count + uint64(n)
		}
	}
}

// at returns the window in which a state holding word decides at now, and
// the count there: the word's own count if that is still its window, 0 if a
// later window has begun.
func (f *fixedRules) at(word uint64, now int64) (w, count uint64) {
	last := word >> f.shift
	if w = f.grid.current(last, now); w == last {
		return w, word & (1<<f.shift - 1)
	}
	return w, 0
}

// result reports a decision made at now in window w, with count events in w
// after it.
func (f *fixedRules) result(ok bool, now int64, w, count uint64) Result {
	r := Result{Allowed: ok, Limit: int(f.events), Remaining: int(f.events - count)}
	left := time.Duration(f.grid.end(w) - now)
	if count > 0 {
		r.ResetAfter = left
	}
	if !ok {
		r.RetryAfter = left
	}
	return r
}

// Peek reports the state of key's window now without counting anything:
// Allowed tells whether Allow(key) would pass, RetryAfter how long until it
// would. Peek does not create the key.
func (f *FixedWindow[K]) Peek(key K) Result {
	now := f.clock.now()
	var word uint64
	if st := f.load(key); st != nil {
		if word = st.word.Load(); word == retiredWord {
			word = 0
		}
	}
	w, count := f.at(word, now)
	return f.result(count < f.events, now, w, count)
}

// Reset forgets key: its window is empty again. Admissions that race with
// Reset happen either wholly before it (and are forgotten) or after it.
func (f *FixedWindow[K]) Reset(key K) { f.reset(key) }

// Refund gives back n events that Take or AllowN admitted for key, as if they
// had not been admitted: keylimit.All uses it to undo a partial admission. It
// lowers the count of the key's window, never below 0; events admitted in a
// window that has ended are gone already. n <= 0 does nothing.
func (f *FixedWindow[K]) Refund(key K, n int) {
	st := f.load(key)
	if st == nil || n <= 0 {
		return
	}
	for {
		old := st.word.Load()
		count := old & (1<<f.shift - 1)
		if old == retiredWord || count == 0 {
			return
		}
		if st.word.CompareAndSwap(old, old-min(uint64(n), count)) {
			return
		}
	}
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
func (f *fixedRules) idleAt(word uint64) int64 {
	w := word >> f.shift
	switch {
	case w == 0:
		return minTime
	case word&(1<<f.shift-1) > 0:
		return f.grid.end(w)
	default:
		return f.grid.start(w)
	}
}

// retireIfIdle retires st if it is idle at now, deciding and retiring in one
// CAS; otherwise it returns when st could be idle.
func (f *fixedRules) retireIfIdle(st *fixedState, now int64) (bool, int64) {
	word := st.word.Load()
	if word == retiredWord {
		return false, now // being removed by Reset
	}
	at := f.idleAt(word)
	return at <= now && st.word.CompareAndSwap(word, retiredWord), at
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
