package keylimit

// A TokenBucket's reservations, and its first-come-first-served WaitN built
// on them: each waiter reserves its turn once, queued behind the waiters of
// its key that came before it, and sleeps until it. The windows' WaitN is
// the package's (wait.go): a window cannot set aside a place in a window
// that has not begun without counting it there now.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// reservation is n events of a key that a TokenBucket has set aside for a
// waiter: they may happen once delay has passed, and must not happen
// before. cancel gives them back.
type reservation[K comparable] struct {
	b   *TokenBucket[K]
	key K
	ok  bool
	at  int64 // when the events may happen, in the bucket's time
	res Result
	adm Admission
	// canceled guards Cancel: one Cancel gives back, at most once.
	canceled atomic.Bool
}

// reserveN sets aside n events for key in the bucket and returns the
// reservation: the events may happen after its delay, which is 0 if the
// tokens are there now. It reserves nothing, and the reservation is not ok,
// if the tokens would come later than maxDelay from now, or never (n above
// the burst: its RetryAfter is then InfDuration). So a flood of waiters
// cannot push a key further ahead than they can wait. Reserving takes one
// compare-and-swap, as Take does.
func (b *TokenBucket[K]) reserveN(key K, n int, maxDelay time.Duration) *reservation[K] {
	r := &reservation[K]{b: b, key: key}
	if n <= 0 || maxDelay < 0 {
		r.res = impossible(b.Peek(key), n)
		if n == 0 && maxDelay >= 0 {
			r.ok, r.at = true, b.keys.clock.now()
		}
		return r
	}
	d := bucketDecision{ahead: min(int64(maxDelay), int64(maxSpan))}
	b.decide(key, n, &d)
	c, v := d.c, d.v
	b.keys.counts.admits(v, b.keys.overflow)
	switch v {
	case untracked:
		r.res = b.keys.untracked(c.arith.burst, n)
		r.ok, r.at = r.res.Allowed, d.now
	case never:
		r.res = impossible(b.Peek(key), n)
	case refused:
		r.res = c.arith.result(false, &d)
	default:
		r.ok = true
		r.at = d.next - c.arith.tau
		r.adm = Admission{N: n, Mark: d.next, By: b, state: d.st, key: d.key, unit: c.arith.interval}
		r.res = c.arith.allowed(d.now, d.next)
	}
	return r
}

// delay returns how long from now the caller must wait before the events
// happen: 0 if they may happen now, InfDuration if the reservation is not
// ok.
func (r *reservation[K]) delay() time.Duration {
	if !r.ok {
		return InfDuration
	}
	return time.Duration(max(r.at-r.b.keys.clock.now(), 0))
}

// cancel gives back what the reservation took, as far as later admissions
// and reservations allow (they keep their times, so past a bucket's worth
// of them it gives back nothing), and never more: see Refund. Cancel after the events happened gives back what the bucket has
// not refilled since. Only the first Cancel does anything.
func (r *reservation[K]) cancel() {
	if r.ok && r.canceled.CompareAndSwap(false, true) {
		r.b.refund(&r.adm)
	}
}

// waitKey is the bucket's WaitN (see Keyed.WaitN). Waiters are served first
// come, first served: each reserves its turn once (reserveN, with ctx's
// deadline as the greatest delay) and sleeps until it; a waiter that gives
// up cancels its reservation, and the waiters behind it move up into its
// turn, however long the queue (by only what cancel would give back if
// another reservation came between them). It fails at once, taking
// nothing, if n can never pass or if the wait would outlast ctx's
// deadline; it returns ctx's error, wrapped, if ctx ends first, having
// given back its turn.
func (b *TokenBucket[K]) waitKey(ctx context.Context, key K, n int) error {
	return b.waitQueued(ctx, key, n)
}

// waitQueues are the waiters of a TokenBucket's WaitN, one queue per key
// that has any, in the order they reserved their turns. Only WaitN uses
// them: Allow and Take never look.
type waitQueues[K comparable] struct {
	mu sync.Mutex // protects m and every queue in it
	m  map[K]*waitQueue
}

// waitQueue is one key's waiters, oldest first.
type waitQueue []*waiter

// waiter is one WaitN asleep until its turn.
type waiter struct {
	adm Admission // what its reservation took: its turn is adm.Mark − tau
	at  int64     // its turn, in the bucket's time
	// t wakes it at its turn. It is made, and reset when a waiter ahead
	// of it cancels, under the queues' lock: once a cancelling WaitN has
	// returned, every waiter behind it sleeps until its new turn.
	t *clock.Timer
	// moved is signalled when a waiter ahead of it cancelled and its new
	// turn has come.
	moved chan struct{}
}

// waitQueued is TokenBucket.WaitN.
func (b *TokenBucket[K]) waitQueued(ctx context.Context, key K, n int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
	}
	// The fast path: tokens there now need no queue, no lock and no
	// reservation. No newcomer gets ahead of a waiter this way: while one
	// waits, the TAT is more than tau ahead of now, and no Take fits.
	if n > 0 {
		var d bucketDecision
		if b.decide(key, n, &d); d.v == admitted {
			b.keys.counts.admits(admitted, b.keys.overflow)
			return nil
		}
	}
	ts := &b.keys.clock
	maxDelay := time.Duration(maxSpan)
	if deadline, ok := ctx.Deadline(); ok {
		maxDelay = deadline.Sub(ts.timers.Now())
	}
	q := &b.queues
	q.mu.Lock()
	r := b.reserveN(key, n, max(maxDelay, 0))
	if !r.ok {
		q.mu.Unlock()
		res := r.res
		switch {
		case res.Err != nil:
			return res.Err
		case res.RetryAfter == InfDuration:
			return fmt.Errorf("%w: %s can never pass a limit of %d at once", ErrExceedsLimit, events(n), res.Limit)
		case res.Untracked:
			// The key cap left no place: wait as for any limiter.
			return waitN[K](ctx, b, ts.timers, key, n)
		}
		return &deadlineError{n: n, wait: res.RetryAfter, left: max(maxDelay, 0)}
	}
	delay := r.delay()
	if delay == 0 {
		q.mu.Unlock()
		return nil
	}
	w := &waiter{adm: r.adm, at: r.at, moved: make(chan struct{}, 1)}
	if q.m == nil {
		q.m = make(map[K]*waitQueue)
	}
	queue := q.m[key]
	if queue == nil {
		queue = new(waitQueue)
		q.m[key] = queue
	}
	*queue = append(*queue, w)
	w.t = ts.timers.Timer(delay)
	q.mu.Unlock()

	defer w.t.Stop()
	for {
		select {
		case <-w.t.C:
			q.mu.Lock()
			if at, now := w.at, ts.now(); at > now {
				// A timer that fired before a cancel ahead reset it, or
				// early (a clock stepped back).
				w.t.Reset(time.Duration(at - now))
				q.mu.Unlock()
				continue
			}
			b.leave(key, w)
			q.mu.Unlock()
			return nil
		case <-w.moved:
			q.mu.Lock()
			if w.at <= ts.now() { // moved up to a turn that has come
				b.leave(key, w)
				q.mu.Unlock()
				return nil
			}
			q.mu.Unlock() // its timer was reset to its new turn
		case <-ctx.Done():
			q.mu.Lock()
			b.cancel(key, w)
			q.mu.Unlock()
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), ctx.Err())
		}
	}
}

// leave takes w out of key's queue, and returns the waiters behind it. The
// caller holds the queues' lock.
func (b *TokenBucket[K]) leave(key K, w *waiter) (behind []*waiter) {
	queue := b.queues.m[key]
	i := slices.Index(*queue, w)
	*queue = slices.Delete(*queue, i, i+1)
	if len(*queue) == 0 {
		delete(b.queues.m, key)
	}
	return (*queue)[i:]
}

// cancel takes w out of key's queue and gives back its reservation: the
// waiters behind it move up by what was given back, so that they, not a
// newcomer, get it. The caller holds the queues' lock.
func (b *TokenBucket[K]) cancel(key K, w *waiter) {
	behind := b.leave(key, w)
	back := b.giveBack(w, behind)
	if back <= 0 {
		return
	}
	// The reservations behind w were made after it: the refund moved the
	// TAT, the end of their chain, back by back, and each of them may come
	// that much earlier (see DESIGN.md, "Exact refunds").
	now := b.keys.clock.now()
	for _, x := range behind {
		x.at -= back
		x.adm.Mark -= back
		if x.at > now {
			x.t.Reset(time.Duration(x.at - now))
			continue
		}
		select {
		case x.moved <- struct{}{}:
		default:
		}
	}
}

// giveBack gives back w's reservation, which the waiters behind it (the
// queue's, in order) follow, and returns how far it moved the TAT back.
//
// A refund gives back only what lies within a bucket's worth of the TAT
// (see refund): reservations made after w keep their times. When the
// reservations after w's are exactly those behind it, those times are
// ours to move: each waiter's reservation extends the one before it by
// its cost, and the last is the TAT. Then the history without w has each
// of them earlier by w's cost, or by what of w's turn lies after now if
// less (DESIGN.md, "Exact refunds", with every later reservation decided at
// or before now), and the TAT with them: cancel moves them up by that
// much, however long the queue. The caller holds the queues' lock, so no
// waiter joins or leaves meanwhile; a Take, Refund or another reservation of the key
// changes the TAT, which breaks the chain: the refund then keeps their times.
func (b *TokenBucket[K]) giveBack(w *waiter, behind []*waiter) int64 {
	if len(behind) == 0 {
		return b.refund(&w.adm)
	}
	return b.refundMoving(&w.adm, w.adm.N, func(tat, interval int64) bool {
		end := w.adm.Mark
		for _, x := range behind {
			if x.adm.state != w.adm.state || x.adm.unit != interval || x.adm.Mark != end+int64(x.adm.N)*interval {
				return false // another reservation lies in between
			}
			end = x.adm.Mark
		}
		return tat == end // and none after them
	})
}
