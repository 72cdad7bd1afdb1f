package redislimit

// Acquire, and the queue of the Acquires of a key waiting on this
// instance: the polling of its oldest waiter, and its ticket in the key's
// queue in Redis, by which waiters on different instances are served in
// order.

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
)

// The polling of the oldest waiter of a key on an instance: the first wait
// after a refusal, doubled after each up to pollCap's, at most the last.
// The last is short: a slot freed on another instance waits for the first
// waiter in the fleet's queue to ask again. concTicketTTL is how long a waiter's ticket stays in
// the queue in Redis without its waiter asking: a waiter that vanished
// holds up the queue that long at most.
const (
	concPollMin   = 2 * time.Millisecond
	concPollMax   = 25 * time.Millisecond
	concTicketTTL = time.Second
)

// concTicketTTLµs is concTicketTTL for the script, and noTicket the
// ticket of a call that has none, boxed once.
var (
	concTicketTTLµs any = int64(concTicketTTL / time.Microsecond)
	noTicket        any = ""
)

// concQueue is the Acquires of one key waiting on this instance, oldest
// first: only the first asks Redis.
type concQueue struct {
	waiters []*concWaiter
}

// concWaiter is one Acquire in a queue.
type concWaiter struct {
	n int
	// head is set, under the limiter's mu, once the waiter is first in its
	// queue.
	head atomic.Bool
	// wake is signalled (without blocking: it holds one signal) when the
	// waiter becomes the head, the key is released on this instance, or the
	// limit changes.
	wake chan struct{}
}

// queued reports whether an Acquire of key waits on this instance.
func (c *Concurrency) queued(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queues[key] != nil
}

// Acquire acquires n of key's slots, waiting under ctx until the fleet
// leaves room for them, and returns the Permit that holds them. On this
// instance waiters are served first come, first served: the oldest asks
// Redis, and no later Acquire or TryAcquire here goes first; across
// instances, see the type's doc.
//
// It fails at once, holding nothing, if ctx has ended or n can never pass
// (n < 0, or above N: keylimit.ErrExceedsLimit, as for a waiter whose n a
// lowered limit leaves above N). If ctx ends first, it returns ctx's
// error, wrapped, holding nothing, and the waiter behind it moves up.
// n == 0 returns the zero Permit at once. While Redis fails, each ask is
// answered by the failure policy: FailClosed keeps the caller waiting
// until Redis answers or ctx ends.
func (c *Concurrency) Acquire(ctx context.Context, key string, n int) (keylimit.Permit, error) {
	if err := ctx.Err(); err != nil {
		return keylimit.Permit{}, fmt.Errorf("redislimit: acquire %s: %w", concSlots(n), err)
	}
	if n == 0 {
		return keylimit.Permit{}, nil
	}
	if n < 0 || int64(n) > c.limit.Load() {
		c.ops.counts.decided(false)
		return keylimit.Permit{}, c.exceeds(n)
	}
	w := c.enqueue(key, n)
	defer c.dequeue(key, w)
	// ticket is this waiter's place in the fleet's queue of the key, in
	// Redis, once it is first here: queued says it may be there still, to
	// be taken out when the waiter leaves otherwise than served by Redis.
	ticket, queued := "", false
	defer func() {
		if queued {
			_, _ = c.callQueued(context.Background(), modeDequeue, key, "", 1, 1, ticket)
		}
	}()
	poll := concPollMin
	var timer <-chan time.Time
	stop := func() {}
	defer func() { stop() }()
	for {
		limit := c.limit.Load()
		if int64(n) > limit {
			c.ops.counts.decided(false)
			return keylimit.Permit{}, c.exceeds(n)
		}
		if w.head.Load() {
			select { // a wake-up from before this ask is answered by it
			case <-w.wake:
			default:
			}
			if ticket == "" {
				ticket = c.id + ".t" + strconv.FormatUint(c.seq.Add(1), 10)
			}
			p, r, ahead, err := c.tryQueued(ctx, key, n, limit, ticket)
			queued = !(r.Allowed && err == nil) // served by Redis: out of the queue
			if r.Allowed {
				c.ops.counts.decided(true)
				return p, nil
			}
			stop()
			poll = min(poll, c.pollCap(ahead))
			timer, stop = c.after(poll)
			poll *= 2 // capped again before the next wait
		}
		select {
		case <-w.wake:
			poll = concPollMin
		case <-timer:
		case <-ctx.Done():
			c.ops.counts.decided(false)
			return keylimit.Permit{}, fmt.Errorf("redislimit: acquire %s: %w", concSlots(n), ctx.Err())
		}
	}
}

// pollCap is the longest wait before the next ask of a waiter with ahead
// tickets before its own in the fleet's queue (-1: unknown, concPollMax).
// A slot freed anywhere waits for the first ticket's ask, and a ticket
// moves up a place about every hold: so a waiter asks at least every
// (ahead + 1) eighths of the mean hold this instance has seen (4 ms before
// the first release), between concPollMin and concPollMax, and a slot
// freed on another instance stays free for about an eighth of a hold.
func (c *Concurrency) pollCap(ahead int64) time.Duration {
	if ahead < 0 {
		return concPollMax
	}
	step := time.Duration(c.holdNs.Load()) / 8
	if step == 0 {
		step = 2 * concPollMin
	}
	return min(max(step, concPollMin)*time.Duration(min(ahead+1, 1<<10)), concPollMax)
}

// after returns a channel that receives once d has passed on the local
// clock, and a function that stops it.
func (c *Concurrency) after(d time.Duration) (<-chan time.Time, func()) {
	if c.clock.injected == nil {
		t := time.NewTimer(d)
		return t.C, func() { t.Stop() }
	}
	t := c.clock.injected.Timer(d)
	return t.C, func() { t.Stop() }
}

// enqueue puts an Acquire of n slots of key at the end of key's queue.
func (c *Concurrency) enqueue(key string, n int) *concWaiter {
	w := &concWaiter{n: n, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	q := c.queues[key]
	if q == nil {
		q = &concQueue{}
		c.queues[key] = q
	}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		w.head.Store(true)
	}
	c.mu.Unlock()
	c.waiting.Add(1)
	return w
}

// dequeue takes w out of key's queue, and wakes the waiter behind it if w
// was first.
func (c *Concurrency) dequeue(key string, w *concWaiter) {
	c.mu.Lock()
	q := c.queues[key]
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	if len(q.waiters) == 0 {
		delete(c.queues, key)
	} else if first := q.waiters[0]; !first.head.Load() {
		first.head.Store(true)
		signal(first.wake)
	}
	c.mu.Unlock()
	c.waiting.Add(-1)
}

// wake wakes the first waiter of key on this instance, if any.
func (c *Concurrency) wake(key string) {
	c.mu.Lock()
	if q := c.queues[key]; q != nil {
		signal(q.waiters[0].wake)
	}
	c.mu.Unlock()
}
