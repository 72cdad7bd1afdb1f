package keylimit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Concurrency limits each key to N slots held at once: a weighted semaphore
// per key, in the vocabulary of golang.org/x/sync/semaphore. TryAcquire
// takes n slots if they are free, Acquire waits for them under a context,
// first come, first served, and the Permit either returns gives them back.
// A rate limit bounds how often a key acts; a Concurrency bounds how many
// of its calls run at once.
//
// A key's state is one word (the slots held and whether any Acquire waits)
// updated by compare-and-swap, so TryAcquire and Release take no lock and,
// for a key seen before, allocate nothing; a key with waiters is served
// under a lock of its own. A call whose compare-and-swap another caller of
// the key won waits a moment before it tries again (an acquisition up to
// about 16 microseconds a try, a release 4), so that on a hot key the
// winner runs on. Never more than N slots of a key are held, under
// any number of goroutines and through any SetLimit. A key with nothing
// held and nobody waiting is forgotten like any idle key (WithEvictionInterval,
// WithMaxKeys).
//
// With WithMaxHold, slots held too long are taken back, so that a holder
// that never releases (a lost goroutine) cannot wedge its key.
//
// A Concurrency is not a Limiter (it has no Take that could be given back):
// it is a ConcurrencyLimiter.
type Concurrency[K comparable] struct {
	keys    *shard[K, concState]
	core    *concCore // not inline: the evictor and every hold point to it, and must not hold the limiter
	evictor *evictor
	setMu   sync.Mutex // serializes SetLimit
}

// MaxConcurrency is the largest limit a Concurrency takes: the slots of a
// key held at once, 2^20 − 1.
const MaxConcurrency = concCountMask

// concState is one key's state.
type concState struct {
	// word is the key's slots and waiters. Bits 0-19 count the slots held
	// (with a longest hold, those acquired in the current epoch, see
	// concCore.epoch). Bits 20-60 are, with a longest hold, the count of the
	// epoch before and the current epoch mod 2^21; without one, own's
	// generation (concGenShift). Bit 61 says that own is free (concSpare;
	// never with a longest hold), bit 62 that an Acquire waits
	// (concWaiters), bit 63 that the state is retired (concRetired), after
	// which nothing writes it. Acquisitions add by CAS only if the slots
	// held stay at most N and no waiter is queued; releases subtract from
	// the count their epoch is in. While concWaiters is set, every write is
	// made under q.mu.
	word atomic.Uint64
	// q is the key's waiters, made by the first Acquire that waits.
	q atomic.Pointer[concQueue]
	// holdNs estimates the key's hold time, in ns: a moving average of
	// sampled holds (see concCore.permit), 0 before the first.
	holdNs atomic.Int64
	// own is the key's own hold record, without a longest hold: the CAS
	// that acquires takes it (clears concSpare), and the CAS that releases
	// gives it back and moves its generation, in the word, on; so a key
	// held by one holder at a time (the common case) costs two CASes a
	// hold, and no trip to holdPool. Its gen and n are unused (the Permit
	// carries n), its core and st never change, and its at is written and
	// read atomically, only for a timed hold (see releaseOwn). The state
	// is 64 bytes.
	own hold
}

const (
	concCountBits = 20
	concCountMask = 1<<concCountBits - 1
	concTagShift  = 2 * concCountBits
	concTagMask   = 1<<21 - 1
	concGenShift  = concCountBits
	concGenMask   = 1<<41 - 1
	concSpare     = 1 << 61
	concWaiters   = 1 << 62
	concRetired   = 1 << 63
)

// held is the number of slots w holds.
func (c *concCore) held(w uint64) int64 {
	if c.maxHold == 0 {
		return int64(w & concCountMask)
	}
	return int64(w&concCountMask + w>>concCountBits&concCountMask)
}

// concQueue is one key's waiters.
type concQueue struct {
	mu      sync.Mutex    // protects waiters, and every write of the word while concWaiters is set
	waiters []*concWaiter // oldest first
	// queued is the slots the waiters ask for, written under mu and read
	// without it for RetryAfter.
	queued atomic.Int64
}

// concWaiter is one Acquire asleep in a queue.
type concWaiter struct {
	n int64
	// ready is closed, under the queue's mu, when the waiter leaves the
	// queue other than by giving up: with its permit, or with err.
	ready  chan struct{}
	permit Permit
	err    error
}

// queue returns st's queue, making it if need be.
func (st *concState) queue() *concQueue {
	if q := st.q.Load(); q != nil {
		return q
	}
	st.q.CompareAndSwap(nil, new(concQueue))
	return st.q.Load()
}

// concCore is what a Concurrency's holds, its evictor and its keys share:
// everything but the map.
type concCore struct {
	clock *timeSource
	limit atomic.Int64
	// maxHold is WithMaxHold's, in ns; 0: a hold is never taken back.
	maxHold int64
	// reclaimed counts slots taken back; waiting, the Acquires queued now.
	reclaimed atomic.Uint64
	waiting   atomic.Int64
	// nextIdle is the shard's: lowered whenever a key is left idle, if
	// capped (the shard has a key cap, which is all nextIdle serves).
	nextIdle *atomic.Int64
	capped   bool
	logger   *slog.Logger // nil: slog.Default()
	rlog     reclaimLog
}

// NewConcurrency returns a Concurrency that lets each key hold at most n
// slots at once. It returns an error if n is below 1 or above
// MaxConcurrency, or if an option is invalid.
//
// The limiter forgets a key once nothing of it is held and nobody waits
// (see WithEvictionInterval and WithMaxKeys). Call Close when done with it
// to stop its evictor at once; a limiter dropped without Close stops it once
// the garbage collector finds it unreachable.
func NewConcurrency[K comparable](n int, opts ...Option) (*Concurrency[K], error) {
	o := applyOptions(opts)
	if o.err != nil {
		return nil, o.err
	}
	if err := validConcurrency(n); err != nil {
		return nil, err
	}
	core := &concCore{maxHold: int64(o.maxHold), capped: o.maxKeys > 0, logger: o.logger}
	core.limit.Store(int64(n))
	c := &Concurrency[K]{core: core}
	c.keys = newShard(o, stateHooks[K, concState]{
		newState: func(K) *concState {
			st := new(concState)
			if core.maxHold == 0 {
				st.word.Store(concSpare)
				st.own.core, st.own.st = core, st
			}
			return st
		},
		retireIfIdle: func(st *concState, _ int64) (bool, int64) { return core.retireIfIdle(st) },
		// No retire: a Concurrency has no Reset, which would let N more in
		// beside the holders.
	})
	core.clock, core.nextIdle = &c.keys.clock, &c.keys.nextIdle
	c.evictor = startEvictor(c, c.keys, o, o.maxHold)
	return c, nil
}

func validConcurrency(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("keylimit: concurrency limit %d is below 1", n)
	case n > MaxConcurrency:
		return fmt.Errorf("keylimit: concurrency limit %d is above MaxConcurrency (%d)", n, MaxConcurrency)
	}
	return nil
}

// WithMaxHold makes a Concurrency take back slots held longer than d, so
// that a holder that never releases (a lost goroutine) cannot wedge its
// key. A slot is never taken back sooner than d after its acquisition; from
// 2 × d after it at the latest, it is free to every call on its key (Peek
// counts it free too), and taken back by the first that writes the key, a
// sweep of the evictor, or a waiter of the key, which wakes for it. Slots
// taken back are counted in Stats.Reclaimed and logged (see WithLogger);
// the Release of their Permit afterwards gives back nothing. d == 0, the
// default, keeps a slot until its Release. The rate limiters hold nothing,
// and their constructors refuse the option.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(o *options) {
		switch {
		case d < 0:
			o.fail(fmt.Errorf("keylimit: longest hold %v is negative", d))
		case d > maxSpan:
			o.fail(fmt.Errorf("keylimit: longest hold %v is longer than %v", d, maxSpan))
		default:
			o.maxHold = d
		}
	})
}

// SetLimit makes n the slots each key may hold at once. It returns an
// error, and changes nothing, if n is below 1 or above MaxConcurrency.
//
// Slots held stay held, even above a lowered n: no acquisition then
// succeeds until the holders have released enough to leave room under n,
// so once SetLimit returns, no more than n are ever held but by holders
// that acquired before. A raised n serves the waiters it makes room for at
// once. Waiters that ask for more than n fail with ErrExceedsLimit.
func (c *Concurrency[K]) SetLimit(n int) error {
	if err := validConcurrency(n); err != nil {
		return err
	}
	c.setMu.Lock()
	defer c.setMu.Unlock()
	c.core.limit.Store(int64(n))
	// Every key that has a queue goes through its lock: a grant under way
	// on the old limit ends before SetLimit returns, and the waiters a
	// raised limit has room for are served now.
	c.keys.m.Range(func(_ uint64, st *concState) bool {
		if q := st.q.Load(); q != nil {
			q.mu.Lock()
			c.core.grant(st, q)
			q.mu.Unlock()
		}
		return true
	})
	return nil
}

// TryAcquire acquires n of key's slots if they are free now and no Acquire
// of key waits (a waiter is never overtaken), and reports the decision and
// the key after it; it never waits. Release the Permit when done. A refused
// call holds nothing, and its Permit is the zero Permit.
//
// The Result's Limit is N and Remaining the slots still free after the
// decision (0 while a waiter is queued). A refusal's RetryAfter is an
// estimate, not a promise: the key's recent hold times (a moving average of
// a sample of them, or a second, or the longest hold, before the first),
// scaled by the slots that must be released first over N. ResetAfter is 0.
//
// n == 0 is always allowed and holds nothing. n < 0, or n above N, can
// never pass: the Result is refused with RetryAfter InfDuration.
func (c *Concurrency[K]) TryAcquire(key K, n int) (Permit, Result) {
	limit := c.core.limit.Load()
	if n <= 0 || int64(n) > limit {
		if n != 0 {
			c.keys.counts.admits(never, c.keys.overflow)
		}
		return Permit{}, impossible(c.Peek(key), n)
	}
	st := c.keys.loadOrCreate(key)
	for {
		if st == nil {
			c.keys.counts.admits(untracked, c.keys.overflow)
			return Permit{}, c.keys.untracked(int(limit), n)
		}
		p, ok, gone, w, limit := c.core.take(st, int64(n))
		switch {
		case ok:
			c.keys.counts.admits(admitted, c.keys.overflow)
			return p, Result{Allowed: true, Limit: int(limit), Remaining: int(max(limit-c.core.held(w), 0))}
		case !gone:
			c.keys.counts.admits(refused, c.keys.overflow)
			return Permit{}, c.core.report(st, w, int64(n), limit)
		}
		st = c.keys.replace(key, st)
	}
}

// Acquire acquires n of key's slots, waiting under ctx until they are free,
// and returns the Permit that holds them. Waiters of a key are served first
// come, first served: when slots are released, the oldest waiter gets them
// as soon as its n fit, and no later waiter, however small, goes first; nor
// does a TryAcquire while anyone waits.
//
// It fails at once, holding nothing, if ctx has ended, or if n can never
// pass (n < 0, or above N: ErrExceedsLimit, as for a waiter whose n a
// lowered limit leaves above N). If ctx ends first, it returns ctx's error,
// wrapped, holding nothing, and the waiters behind it move up. n == 0
// returns the zero Permit at once. A key the key cap leaves untracked
// (WithMaxKeys) is asked again after the Result's RetryAfter, on the
// limiter's clock.
func (c *Concurrency[K]) Acquire(ctx context.Context, key K, n int) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, fmt.Errorf("keylimit: acquire %s: %w", slots(n), err)
	}
	if n == 0 {
		return Permit{}, nil
	}
	if n < 0 || int64(n) > c.core.limit.Load() {
		c.keys.counts.admits(never, c.keys.overflow)
		return Permit{}, c.core.exceeds(int64(n))
	}
	st := c.keys.loadOrCreate(key)
	for {
		if st == nil {
			r := c.keys.untracked(int(c.core.limit.Load()), n)
			c.keys.counts.admits(untracked, c.keys.overflow)
			if r.Allowed {
				return Permit{}, nil
			}
			if err := sleep(ctx, c.core.clock.timers, r.RetryAfter); err != nil {
				return Permit{}, fmt.Errorf("keylimit: acquire %s: %w", slots(n), err)
			}
			st = c.keys.loadOrCreate(key)
			continue
		}
		p, ok, gone, _, _ := c.core.take(st, int64(n))
		if !gone && !ok {
			var err error
			if p, err, gone = c.core.wait(ctx, st, int64(n)); !gone {
				ok = err == nil
				v := refused
				if ok {
					v = admitted
				}
				c.keys.counts.admits(v, c.keys.overflow)
				return p, err
			}
		}
		if ok {
			c.keys.counts.admits(admitted, c.keys.overflow)
			return p, nil
		}
		st = c.keys.replace(key, st)
	}
}

// Peek reports key's state now, holding nothing: Allowed says whether
// TryAcquire(key, 1) would pass, Remaining how many slots are free (0 while
// a waiter is queued), and a refusal's RetryAfter is TryAcquire's estimate.
// Peek does not create the key.
func (c *Concurrency[K]) Peek(key K) Result {
	limit := c.core.limit.Load()
	st := c.keys.load(key)
	var w uint64
	if st != nil {
		w = st.word.Load()
	}
	// The clock is read whether the key is known or not, so that Peek
	// always raises the limiter's latest time (see timeSource).
	e := c.core.epoch(c.core.now())
	if st == nil || w&concRetired != 0 {
		return Result{Allowed: true, Limit: int(limit), Remaining: int(limit)}
	}
	adv, _ := c.core.advance(w, e)
	return c.core.report(st, adv, 1, limit)
}

// Stats returns what the limiter has counted (see Stats and WithStats):
// with Limit, the slots each key may hold at once (N, or the last
// SetLimit's), Reclaimed, the slots taken back from holds past
// WithMaxHold, and Waiting, the Acquires waiting now.
func (c *Concurrency[K]) Stats() Stats {
	st := c.keys.stats()
	st.Reclaimed = c.core.reclaimed.Load()
	st.Waiting = int(c.core.waiting.Load())
	st.Limit = int(c.core.limit.Load())
	return st
}

// Close stops the limiter's evictor. The limiter still answers after
// Close, exactly, but no longer forgets idle keys nor takes back slots in
// the background. It returns nil.
//
// The error is there so that a limiter is an io.Closer, closed as
// anything else a program opens is (a defer, a list of io.Closers); a
// Redis limiter's Close has the same signature.
func (c *Concurrency[K]) Close() error {
	c.evictor.close()
	return nil
}

// slots formats a count of slots: "1 slot", "3 slots".
func slots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}

// The core: the word's arithmetic, and the paths that write it.

// now is the limiter's time if a longest hold needs it, else 0: without
// one, neither decisions nor releases read the clock.
func (c *concCore) now() int64 {
	if c.maxHold == 0 {
		return 0
	}
	return c.clock.now()
}

// epoch is the epoch of time now: the longest holds since the limiter's
// creation, whole. A slot acquired in epoch e is held past the longest hold
// by the start of epoch e + 2, and is taken back by the first write of its
// key's word from then on. Without a longest hold there is one epoch, 0.
func (c *concCore) epoch(now int64) int64 {
	if c.maxHold == 0 {
		return 0
	}
	return now / c.maxHold
}

// advance returns w moved to epoch e, and the slots it takes back: the
// previous epoch's, if e is the next one, and all, if it is later still.
// The word records e mod 2^21: its distance to e is read mod 2^21, which
// is exact while a word is never left unwritten for 2^21 epochs, and
// otherwise takes back later than it should, never sooner (every reading of
// the time is taken after the word it moves, so e is never behind the
// word's epoch).
func (c *concCore) advance(w uint64, e int64) (uint64, int64) {
	if c.maxHold == 0 {
		return w, 0
	}
	tag := uint64(e) & concTagMask
	d := (tag - w>>concTagShift) & concTagMask
	if d == 0 {
		return w, 0
	}
	flags := w & (concSpare | concWaiters | concRetired)
	cur, prev := w&concCountMask, w>>concCountBits&concCountMask
	if d == 1 {
		return flags | tag<<concTagShift | cur<<concCountBits, int64(prev)
	}
	return flags | tag<<concTagShift, int64(cur + prev)
}

// take tries to add n slots to st at once. If admitted (ok), it returns
// the Permit and the word after its CAS; if not, the word it was refused on
// (advanced): the slots do not fit, or a waiter is queued. gone reports
// that st is retired: the caller looks the key up again. limit is the N it
// decided under.
func (c *concCore) take(st *concState, n int64) (p Permit, ok, gone bool, w uint64, limit int64) {
	// The first try of the common case, written out: no longest hold,
	// nobody waiting.
	limit = c.limit.Load()
	w = st.word.Load()
	if c.maxHold == 0 && w&(concWaiters|concRetired) == 0 && c.held(w)+n <= limit {
		next := (w + uint64(n)) &^ concSpare
		if !st.word.CompareAndSwap(w, next) {
			return c.takeLoop(st, n, true)
		}
		p = c.permit(st, n, 0, w)
		if lower := c.limit.Load(); lower >= limit || c.held(next) <= lower {
			return p, true, false, next, limit
		}
		p.Release() // see takeLoop
	}
	return c.takeLoop(st, n, false)
}

// takeLoop is take after its first try: with a longest hold, with
// waiters, or after a lost CAS (lost: the first try's). A lost CAS waits
// before the next try, within holdFirst and holdMost (see there; a
// release that lost waits backoff's shorter time, its slots not free until
// it is done).
func (c *concCore) takeLoop(st *concState, n int64, lost bool) (p Permit, ok, gone bool, w uint64, limit int64) {
	var bo backoff
	if lost {
		bo.WaitWithin(holdFirst, holdMost)
	}
	for {
		limit = c.limit.Load()
		w = st.word.Load()
		// The clock is read after the word, and again after a lost CAS:
		// every time the word was moved to is then at most ours.
		now := c.now()
		e := c.epoch(now)
		adv, freed := c.advance(w, e)
		if w&(concWaiters|concRetired) != 0 || c.held(adv)+n > limit {
			switch {
			case w&concRetired != 0:
				return Permit{}, false, true, w, 0
			case w&concWaiters != 0 && freed > 0:
				c.serve(st) // slots taken back are the waiters'
			}
			return Permit{}, false, false, adv, limit
		}
		next := (adv + uint64(n)) &^ concSpare
		if !st.word.CompareAndSwap(w, next) {
			bo.WaitWithin(holdFirst, holdMost) // let the winner run on
			continue
		}
		if freed > 0 {
			c.reclaim(freed, now)
		}
		p = c.permit(st, n, now, w)
		// SetLimit stores the limit before it returns: a CAS made after
		// SetLimit lowered it reads the lower limit here, and does not
		// count if it went above it.
		if lower := c.limit.Load(); lower < limit && c.held(next) > lower {
			p.Release()
			continue
		}
		return p, true, false, next, limit
	}
}

// permitOwn marks, in Permit.gen, a permit on its key's own record: then
// bits 0-40 of gen are own's generation, and the slots held are at
// permitOwnN (20 bits).
const (
	permitOwn  = 1 << 63
	permitOwnN = 41
)

// permit makes the Permit of n slots of st acquired at now (0 without a
// longest hold) by a CAS from w: on st's own record if the CAS took it,
// else on a pooled one.
func (c *concCore) permit(st *concState, n, now int64, w uint64) Permit {
	if w&concSpare != 0 {
		// n goes in the Permit, not the record: a stale copy's Release reads
		// the record while the next acquisition may write it (issue 37.2).
		gen := w >> concGenShift & concGenMask
		if gen%64 == 0 { // timed, see below
			atomic.StoreInt64(&st.own.at, c.clock.now())
		}
		return Permit{h: &st.own, gen: permitOwn | uint64(n)<<permitOwnN | gen}
	}
	h := holdPool.Get().(*hold)
	h.core, h.st = c, st
	gen := h.gen.Load()
	// One hold in 64 of each record is timed, for the estimate of hold
	// times: two clock reads per hold would be most of the cost of one.
	if c.maxHold == 0 && gen%64 == 0 {
		now = c.clock.now()
	}
	h.n, h.at = int32(n), now
	return Permit{h: h, gen: gen}
}

// releaseOwn gives back the slots of st's own record held by the Permit
// whose gen (without permitOwn) is p: nothing if own is free or at another
// generation (a stale copy of an older Permit).
func (c *concCore) releaseOwn(st *concState, p uint64) {
	gen, n := p&concGenMask, p>>permitOwnN&concCountMask
	var at int64
	if gen%64 == 0 {
		// A timed hold's time, which its acquisition wrote before handing
		// out the Permit. It is read before the CAS, since after it the
		// record is the next acquisition's, and atomically, since a Release
		// that loses (a stale copy) may read it while the 64th acquisition
		// after gen writes it: that Release's CAS fails, and it is unused.
		at = atomic.LoadInt64(&st.own.at)
	}
	var bo backoff
	for {
		w := st.word.Load()
		if w&(concSpare|concRetired) != 0 || w>>concGenShift&concGenMask != gen {
			return
		}
		next := (w-n)&^(concGenMask<<concGenShift) | (gen+1)&concGenMask<<concGenShift | concSpare
		if w&concWaiters != 0 {
			q := st.q.Load()
			q.mu.Lock()
			if st.word.CompareAndSwap(w, next) {
				c.grant(st, q)
				q.mu.Unlock()
				break
			}
			q.mu.Unlock()
			continue
		}
		if st.word.CompareAndSwap(w, next) {
			if c.capped && c.held(next) == 0 {
				c.idle()
			}
			break
		}
		bo.Wait() // lost to another caller of the key: let it run on
	}
	if gen%64 == 0 {
		st.sample(c.clock.now() - at)
	}
}

// release gives back n slots of st acquired at time at, on a pooled
// record; timed says that its hold is timed. Slots whose epoch is two or
// more behind are no longer counted (they were taken back), and nothing is
// given back for them.
func (c *concCore) release(st *concState, n, at int64, timed bool) {
	var bo backoff
	for {
		w := st.word.Load()
		if w&(concWaiters|concRetired) != 0 {
			if w&concRetired != 0 {
				return // taken back, and the key forgotten since
			}
			q := st.q.Load()
			q.mu.Lock()
			for !c.releaseWord(st, st.word.Load(), n, at, timed) {
			}
			c.grant(st, q)
			q.mu.Unlock()
			return
		}
		if c.releaseWord(st, w, n, at, timed) {
			return
		}
		bo.Wait() // lost to another caller of the key: let it run on
	}
}

// releaseWord makes release's CAS from w, and reports whether it is done.
func (c *concCore) releaseWord(st *concState, w uint64, n, at int64, timed bool) bool {
	now := c.now()
	cur := c.epoch(now)
	next, freed := c.advance(w, cur)
	e := c.epoch(at)
	switch cur - e {
	case 0:
		next -= uint64(n)
	case 1:
		next -= uint64(n) << concCountBits
	}
	if next != w && !st.word.CompareAndSwap(w, next) {
		return false
	}
	if freed > 0 {
		c.reclaim(freed, now)
	}
	if c.capped && c.held(next) == 0 && next&concWaiters == 0 {
		c.idle()
	}
	if timed && cur-e < 2 {
		if c.maxHold == 0 {
			now = c.clock.now()
		}
		st.sample(now - at)
	}
	return true
}

// sample adds a hold of d ns to st's estimate, a moving average that
// weighs the newest sample a quarter. Concurrent samples may overwrite one
// another: it is an estimate.
func (st *concState) sample(d int64) {
	d = max(d, 1)
	if old := st.holdNs.Load(); old != 0 {
		d = max(old+(d-old)/4, 1)
	}
	st.holdNs.Store(d)
}

// idle notes that a key was left with nothing held and nobody waiting: a
// key cap's sweep may find room again (shard.nextIdle). Only a capped
// limiter calls it.
func (c *concCore) idle() {
	if c.nextIdle.Load() != minTime {
		c.nextIdle.Store(minTime)
	}
}

// serve grants st's waiters what is free, under its lock.
func (c *concCore) serve(st *concState) {
	if q := st.q.Load(); q != nil {
		q.mu.Lock()
		c.grant(st, q)
		q.mu.Unlock()
	}
}

// grant serves q's waiters in order while the oldest fits, fails those
// whose n is above the limit, takes back what the epoch says, and keeps the
// word's concWaiters in step with the queue. The caller holds q.mu.
func (c *concCore) grant(st *concState, q *concQueue) {
	for {
		w := st.word.Load()
		if w&concRetired != 0 {
			return // no waiter: the evictor retires only a state nobody waits on
		}
		now := c.now()
		e := c.epoch(now)
		adv, freed := c.advance(w, e)
		limit := c.limit.Load()
		if len(q.waiters) == 0 {
			next := adv &^ concWaiters
			if next != w && !st.word.CompareAndSwap(w, next) {
				continue
			}
			c.reclaim(freed, now)
			if c.capped && c.held(next) == 0 {
				c.idle()
			}
			return
		}
		wt := q.waiters[0]
		if wt.n > limit {
			wt.err = c.exceeds(wt.n)
			c.dequeue(q, 0)
			close(wt.ready)
			continue
		}
		if c.held(adv)+wt.n > limit {
			if freed > 0 && !st.word.CompareAndSwap(w, adv) {
				continue
			}
			c.reclaim(freed, now)
			return
		}
		next := (adv + uint64(wt.n)) &^ concSpare
		if len(q.waiters) == 1 {
			next &^= concWaiters
		}
		if !st.word.CompareAndSwap(w, next) {
			continue
		}
		c.reclaim(freed, now)
		wt.permit = c.permit(st, wt.n, now, w)
		c.dequeue(q, 0)
		close(wt.ready)
	}
}

// dequeue removes the i-th waiter of q. The caller holds q.mu.
func (c *concCore) dequeue(q *concQueue, i int) {
	q.queued.Add(-q.waiters[i].n)
	c.waiting.Add(-1)
	q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
	q.waiters[:len(q.waiters)+1][len(q.waiters)] = nil // let the waiter go
}

// wait queues an Acquire of n slots of st, and sleeps until it is granted,
// fails, or ctx ends. gone reports that st was retired before the Acquire
// could queue: the caller looks the key up again.
func (c *concCore) wait(ctx context.Context, st *concState, n int64) (p Permit, err error, gone bool) {
	q := st.queue()
	wt := &concWaiter{n: n, ready: make(chan struct{})}
	q.mu.Lock()
	for {
		w := st.word.Load()
		if w&concRetired != 0 {
			q.mu.Unlock()
			return Permit{}, nil, true
		}
		now := c.now()
		e := c.epoch(now)
		adv, freed := c.advance(w, e)
		if limit := c.limit.Load(); w&concWaiters == 0 && c.held(adv)+n <= limit {
			// Released since take: nobody waits, take them.
			if !st.word.CompareAndSwap(w, (adv+uint64(n))&^concSpare) {
				continue
			}
			q.mu.Unlock()
			c.reclaim(freed, now)
			return c.permit(st, n, now, w), nil, false
		}
		if w&concWaiters != 0 || st.word.CompareAndSwap(w, adv|concWaiters) {
			break
		}
	}
	q.waiters = append(q.waiters, wt)
	q.queued.Add(n)
	c.waiting.Add(1)
	c.grant(st, q) // the limit may have changed, or slots been taken back
	q.mu.Unlock()

	// With a longest hold, slots are taken back at the start of an epoch:
	// a waiter wakes then, in case nobody else writes the word.
	var wake <-chan time.Time
	if c.maxHold > 0 {
		t := c.clock.timers.Timer(c.untilNextEpoch())
		defer t.Stop()
		wake = t.C
		for {
			select {
			case <-wt.ready:
				return wt.permit, wt.err, false
			case <-ctx.Done():
				return c.giveUp(ctx, st, q, wt)
			case <-wake:
				c.serve(st)
				t.Reset(c.untilNextEpoch())
			}
		}
	}
	select {
	case <-wt.ready:
		return wt.permit, wt.err, false
	case <-ctx.Done():
		return c.giveUp(ctx, st, q, wt)
	}
}

// untilNextEpoch is the time from now to the start of the next epoch.
func (c *concCore) untilNextEpoch() time.Duration {
	now := c.clock.now()
	return time.Duration((c.epoch(now)+1)*c.maxHold - now)
}

// giveUp takes wt, whose ctx has ended, out of q: the waiters behind it move
// up. If it was granted meanwhile, its slots are given back.
func (c *concCore) giveUp(ctx context.Context, st *concState, q *concQueue, wt *concWaiter) (Permit, error, bool) {
	q.mu.Lock()
	select {
	case <-wt.ready:
		q.mu.Unlock()
		wt.permit.Release()
	default:
		c.dequeue(q, slices.Index(q.waiters, wt))
		c.grant(st, q)
		q.mu.Unlock()
	}
	return Permit{}, fmt.Errorf("keylimit: acquire %s: %w", slots(int(wt.n)), ctx.Err()), false
}

// reclaimLog is where the log lines of slots taken back stand, under mu.
type reclaimLog struct {
	mu       sync.Mutex
	any      bool   // a line was logged
	last     int64  // the limiter's time of the last line
	unlogged uint64 // slots taken back since, not yet in a line
}

// reclaim counts freed slots taken back at now, and logs them: the first
// time, and then at most once per capQuiet of the limiter's clock, with
// the slots taken back since the last line.
func (c *concCore) reclaim(freed, now int64) {
	if freed == 0 {
		return
	}
	c.reclaimed.Add(uint64(freed))
	l := &c.rlog
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unlogged += uint64(freed)
	if l.any && now-l.last < capQuiet && now >= l.last {
		return
	}
	logger := c.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.Warn("keylimit: slots held past the longest hold were taken back; their holders never released them",
		"max_hold", time.Duration(c.maxHold), "slots", l.unlogged, "reclaimed_so_far", c.reclaimed.Load())
	l.any, l.last, l.unlogged = true, now, 0
}

// report is the Result of a request of n slots on st, refused or asked by
// Peek, with st's word w (advanced) under limit.
func (c *concCore) report(st *concState, w uint64, n, limit int64) Result {
	free := max(limit-c.held(w), 0)
	r := Result{Limit: int(limit), Remaining: int(free)}
	var queued int64
	if w&concWaiters != 0 {
		r.Remaining = 0
		if q := st.q.Load(); q != nil {
			queued = q.queued.Load()
		}
	} else if c.held(w)+n <= limit {
		r.Allowed = true
		return r
	}
	r.RetryAfter = c.retryAfter(st, max(c.held(w)+queued+n-limit, 1), limit)
	return r
}

// retryAfter estimates how long until need slots of st are released: the
// estimate of its hold time × need / limit, at least 1 ns.
func (c *concCore) retryAfter(st *concState, need, limit int64) time.Duration {
	est := st.holdNs.Load()
	if est == 0 {
		est = int64(time.Second)
		if c.maxHold > 0 {
			est = c.maxHold
		}
	}
	d := float64(est) * float64(need) / float64(limit)
	return time.Duration(max(min(d, float64(maxSpan)), 1))
}

// exceeds is the error of n slots that can never be held.
func (c *concCore) exceeds(n int64) error {
	return fmt.Errorf("%w: %s can never be held at once under a concurrency limit of %d",
		ErrExceedsLimit, slots(int(n)), c.limit.Load())
}

// retireIfIdle is the evictor's hook: it retires st if nothing of it is
// held (once what a longest hold takes back is) and nobody waits, and
// otherwise takes back what it can. A key with slots held may go idle at
// any release, which lowers nextIdle itself; what a longest hold takes back
// makes it idle by the end of the next epoch.
func (c *concCore) retireIfIdle(st *concState) (bool, int64) {
	w := st.word.Load()
	if w&concRetired != 0 {
		return false, maxTime
	}
	if w&concWaiters != 0 {
		c.serve(st)
		return false, maxTime
	}
	now := c.now()
	e := c.epoch(now)
	adv, freed := c.advance(w, e)
	if c.held(adv) == 0 {
		if st.word.CompareAndSwap(w, concRetired) {
			c.reclaim(freed, now)
			return true, 0
		}
		return false, minTime // it changed under us: look again at the next sweep
	}
	if freed > 0 && st.word.CompareAndSwap(w, adv) {
		c.reclaim(freed, now)
	}
	switch {
	case c.maxHold == 0:
		return false, maxTime
	case adv&concCountMask == 0: // only the previous epoch's: taken back at the next
		return false, (e + 1) * c.maxHold
	}
	return false, (e + 2) * c.maxHold
}
