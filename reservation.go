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
)

// Reservation is n events of a key that a TokenBucket has set aside: they may
// happen once Delay has passed, and must not happen before. Cancel gives
// them back. Its methods are safe for concurrent use, once it is returned.
type Reservation[K comparable] struct {
	b   *TokenBucket[K]
	key K
	ok  bool
	at  int64 // when the events may happen, in the bucket's time
	res Result
	adm Admission
	// canceled guards Cancel: one Cancel gives back, at most once.
	canceled atomic.Bool
}

// ReserveN sets aside n events for key in the bucket and returns the
// Reservation: the events may happen after its Delay, which is 0 if the
// tokens are there now. It reserves nothing, and the Reservation is not
// OK, if the tokens would come later than maxDelay from now, or never (n
// above the burst: Result().RetryAfter is then InfDuration). So a flood of
// reservations cannot push a key further ahead than its callers allow.
// Reserving takes one compare-and-swap, as Take does.
//
// The bucket's Wait and WaitN reserve, so waiters are served first come,
// first served. Reserve is for a caller that schedules the events itself.
func (b *TokenBucket[K]) ReserveN(key K, n int, maxDelay time.Duration) *Reservation[K] {
	r := &Reservation[K]{b: b, key: key}
	if n <= 0 || maxDelay < 0 {
		r.res = impossible(b.Peek(key), n)
		if n == 0 && maxDelay >= 0 {
			r.ok, r.at = true, b.keys.clock.now()
		}
		return r
	}
	d := bucketDecision{ahead: min(int64(maxDelay), int64(maxSpan))}
	c, v := b.decide(key, n, &d)
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

// OK reports whether the events were reserved.
func (r *Reservation[K]) OK() bool { return r.ok }

// Delay returns how long from now the caller must wait before the events
// happen: 0 if they may happen now, InfDuration if the Reservation is not
// OK.
func (r *Reservation[K]) Delay() time.Duration {
	if !r.ok {
		return InfDuration
	}
	return time.Duration(max(r.at-r.b.keys.clock.now(), 0))
}

// Result reports the reservation as a decision: for an OK one, the bucket
// after it (Allowed, though the events may have to wait Delay); for one
// that is not, why, with the RetryAfter a Take would have met.
func (r *Reservation[K]) Result() Result { return r.res }

// Cancel gives back what the reservation took, as far as later admissions
// and reservations allow (they keep their times, so past a bucket's worth
// of them it gives back nothing), and never more: see Refund. Cancel after the events happened gives back what the bucket has
// not refilled since. Only the first Cancel does anything.
func (r *Reservation[K]) Cancel() {
	if r.ok && r.canceled.CompareAndSwap(false, true) {
		r.b.refund(r.adm)
	}
}

// Wait blocks until one event for key may happen, takes its token and
// returns nil. Wait is shorthand for WaitN(ctx, key, 1).
func (b *TokenBucket[K]) Wait(ctx context.Context, key K) error { return b.WaitN(ctx, key, 1) }

// WaitN blocks until n events for key may happen and takes their tokens.
// Waiters are served first come, first served: each reserves its turn once
// (ReserveN, with ctx's deadline as the greatest delay) and sleeps until
// it; a waiter that gives up cancels its reservation, and the waiters
// behind it move up into its turn, however long the queue (by only what
// Cancel would give back if a ReserveN came between them). It fails at once, taking nothing, if n can never pass
// (ErrExceedsLimit) or if the wait would outlast ctx's deadline; it returns
// ctx's error, wrapped, if ctx ends first, having given back its turn.
func (b *TokenBucket[K]) WaitN(ctx context.Context, key K, n int) error {
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
	// moved is signalled when a waiter ahead of it cancelled and its turn
	// came earlier.
	moved chan struct{}
}

// waitQueued is TokenBucket.WaitN.
func (b *TokenBucket[K]) waitQueued(ctx context.Context, key K, n int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
	}
	// The fast path: tokens there now need no queue, no lock and no
	// Reservation. No newcomer gets ahead of a waiter this way: while one
	// waits, the TAT is more than tau ahead of now, and no Take fits.
	if n > 0 {
		var d bucketDecision
		if _, v := b.decide(key, n, &d); v == admitted {
			b.keys.counts.admits(v, b.keys.overflow)
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
	r := b.ReserveN(key, n, max(maxDelay, 0))
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
	delay := r.Delay()
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
	q.mu.Unlock()

	t := ts.timers.Timer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			q.mu.Lock()
			if at := w.at; at > ts.now() {
				q.mu.Unlock() // a timer that fired early (a clock stepped back)
				t.Reset(time.Duration(at - ts.now()))
				continue
			}
			b.leave(key, w)
			q.mu.Unlock()
			return nil
		case <-w.moved:
			q.mu.Lock()
			at := w.at
			if at <= ts.now() { // moved up to a turn that has come
				b.leave(key, w)
				q.mu.Unlock()
				return nil
			}
			q.mu.Unlock()
			t.Reset(time.Duration(at - ts.now()))
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
	for _, x := range behind {
		x.at -= back
		x.adm.Mark -= back
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
// waiter joins or leaves meanwhile; a Take, Refund or ReserveN of the key
// changes the TAT, which breaks the chain: the refund then keeps their times.
func (b *TokenBucket[K]) giveBack(w *waiter, behind []*waiter) int64 {
	if len(behind) == 0 {
		return b.refund(w.adm)
	}
	return b.refundMoving(w.adm, func(tat, interval int64) bool {
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
