package keylimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
)

// ErrWouldExceedDeadline is wrapped by the error of a Wait that fails at once
// because the time it would have to wait outlasts its context's deadline. It
// matches context.DeadlineExceeded with errors.Is, since the outcome is the
// same: the deadline would have passed first.
var ErrWouldExceedDeadline = errors.New("keylimit: wait would outlast the context deadline")

// deadlineError says how long the wait would have been.
type deadlineError struct {
	n          int
	wait, left time.Duration
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("keylimit: waiting %v for %s would outlast the context deadline, %v away",
		e.wait, events(e.n), e.left)
}

func (e *deadlineError) Is(target error) bool {
	return target == ErrWouldExceedDeadline || target == context.DeadlineExceeded
}

// events formats a count of events: "1 event", "3 events".
func events(n int) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}

// taker is what waitN needs of a limiter.
type taker[K comparable] interface {
	Take(key K, n int) Result
}

// WaitN blocks until lim admits n events for key, and takes them: the WaitN
// method of this module's limiters, for anything with their Take method,
// such as a combination made by All or a view of your own. It sleeps on the
// timers of c, which should be the clock lim reads (WithClock); nil means
// the system clock. A lim with a WaitN method of its own (a TokenBucket,
// which serves waiters first come, first served) waits by it instead; one
// with a TakeContext method (ContextLimiter) is asked under ctx.
//
// Like the methods, it fails at once, taking nothing, if n can never pass
// (ErrExceedsLimit) or if the wait would outlast ctx's deadline
// (ErrWouldExceedDeadline), and returns ctx's error, wrapped, if ctx ends
// first. Otherwise it asks, sleeps for the Result's RetryAfter and asks
// again, so under contention a waiter may sleep more than once.
func WaitN[K comparable](ctx context.Context, lim interface{ Take(key K, n int) Result }, key K, n int, c clock.Clock) error {
	if w, ok := lim.(interface {
		WaitN(ctx context.Context, key K, n int) error
	}); ok {
		return w.WaitN(ctx, key, n)
	}
	if c == nil {
		c = clock.New()
	}
	return waitN[K](ctx, lim, &timeSource{timers: c}, key, n)
}

// waitN is WaitN for the window types, and for any limiter. It does not
// reserve: it asks, and if refused, sleeps for RetryAfter and asks again, so
// a wait that fails or is cancelled has taken nothing. Under contention a
// waiter may be refused again after its sleep (another caller took the
// capacity); it then sleeps again.
func waitN[K comparable](ctx context.Context, lim taker[K], ts *timeSource, key K, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
		}
		r := take(ctx, lim, key, n)
		if r.Allowed {
			return nil
		}
		if r.Err != nil {
			return r.Err
		}
		if r.RetryAfter == InfDuration {
			return fmt.Errorf("%w: %s can never pass a limit of %d at once", ErrExceedsLimit, events(n), r.Limit)
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := deadline.Sub(ts.timers.Now()); r.RetryAfter > left {
				return &deadlineError{n: n, wait: r.RetryAfter, left: max(left, 0)}
			}
		}
		if err := sleep(ctx, ts, r.RetryAfter); err != nil {
			return fmt.Errorf("keylimit: wait for %s: %w", events(n), err)
		}
	}
}

// take asks lim for n events of key, under ctx if lim takes one. A failure
// policy's answer is as good as a decision here: its error is not the
// wait's.
func take[K comparable](ctx context.Context, lim taker[K], key K, n int) Result {
	if c, ok := lim.(interface {
		TakeContext(ctx context.Context, key K, n int) (Result, error)
	}); ok {
		r, _ := c.TakeContext(ctx, key, n)
		return r
	}
	return lim.Take(key, n)
}

// sleep waits d on the limiter's clock, or until ctx ends.
func sleep(ctx context.Context, ts *timeSource, d time.Duration) error {
	t := ts.timers.Timer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
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
			b.keys.counts.count(v, true)
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
			return waitN[K](ctx, b, ts, key, n)
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
			q.mu.Unlock()
			t.Reset(time.Duration(max(at-ts.now(), 0)))
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
	back := b.refund(w.adm)
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
