package redislimit

// A Concurrency's holds once acquired: their releases, the releases that
// failed and are retried, and the renewer that keeps the live ones from
// expiring.

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// concPendingMax is the most failed releases a limiter keeps for retry:
// about 100 KB with short keys. concDrainTimeout bounds Close's last try
// of them.
const (
	concPendingMax   = 1024
	concDrainTimeout = time.Second
)

// concHold is one live hold of this instance: what its Permit releases and
// the renewer renews.
type concHold struct {
	key string
	id  string
	at  int64 // local ns of the acquisition
	// lost is set when a renewal found the hold gone from Redis: expired
	// (the instance paused, or Redis unreachable, past the expiry).
	lost atomic.Bool
}

// concPending is a release whose call failed, for the renewer to retry.
// Releasing a hold that is not there frees nothing, so a retry is safe.
type concPending struct {
	key, id string
	at      int64 // local ns when it was queued
	// unsure marks the clean-up of an acquisition whose reply was lost: the
	// script, sent, may still run after a release, so a retry that finds no
	// hold keeps it queued, until retryReleases drops it for its age.
	unsure bool
}

// cleanUp releases key's hold id, whose acquisition's reply was lost. Unless
// this call finds and releases it, the renewer tries again, for one and a
// half hold expiries: a script still on its way may record the hold after
// this release.
func (c *Concurrency) cleanUp(key, id string) {
	if rep, err := c.call(context.Background(), modeRelease, key, id, 1, 1); err != nil || !rep.ok {
		c.queueRelease(key, id, true)
	}
}

// queueRelease keeps the release of key's hold id for the renewer to
// retry, unless Close has begun; unsure is concPending's. At the cap the
// oldest is dropped: its hold, if any, expires on its own.
func (c *Concurrency) queueRelease(key, id string, unsure bool) {
	now := c.clock.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if len(c.pending) >= concPendingMax {
		c.pending[0] = concPending{} // for the garbage collector
		c.pending = c.pending[1:]
		c.dropped++
	}
	c.pending = append(c.pending, concPending{key: key, id: id, at: now, unsure: unsure})
}

// retryReleases retries the pending releases, oldest first, each one script
// call, until one fails short of Redis (Redis is still out of reach: the
// rest wait for the next try), ctx ends, or stop is closed. It asks Redis
// even within the failure backoff, as a Reset does: a release never
// retried would hold its slots, unnoticed, until the hold expiry. A release
// queued more than one and a half hold expiries ago is dropped untried: its
// hold has expired (the half is for a script that landed late, and drift
// between the clocks).
func (c *Concurrency) retryReleases(ctx context.Context, stop <-chan struct{}) {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	keep := batch[:0] // the batch is this call's: keep writes behind the loop
	for i, p := range batch {
		now := c.clock.now()
		if now-p.at > c.expiryNs+c.expiryNs/2 {
			continue
		}
		if stopped(stop) || ctx.Err() != nil {
			keep = append(keep, batch[i:]...)
			break
		}
		rep, err := c.run(ctx, now, modeRelease, p.key, p.id, 1, 1)
		if err != nil && !isReply(err) {
			keep = append(keep, batch[i:]...)
			break
		}
		if err != nil || (p.unsure && !rep.ok) {
			keep = append(keep, p)
			continue
		}
		if rep.ok {
			c.wake(p.key)
		}
	}
	clear(batch[len(keep):])
	c.mu.Lock()
	// The releases queued meanwhile are newer: they go behind.
	c.pending = append(keep, c.pending...)
	if over := len(c.pending) - concPendingMax; over > 0 {
		clear(c.pending[:over])
		c.pending = c.pending[over:]
		c.dropped += over
	}
	c.mu.Unlock()
}

// stopped reports whether stop is closed; a nil stop never is.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// isReply reports whether err is an error reply of Redis's (Redis was
// reached), as opposed to a timeout or a connection's failure.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && !errors.Is(err, context.DeadlineExceeded)
}

// logDropped logs the failed releases given up since the last call: those
// the cap pushed out, and those Close could not make.
func (c *Concurrency) logDropped() {
	c.mu.Lock()
	n := c.dropped
	c.dropped = 0
	c.mu.Unlock()
	if n > 0 {
		c.ops.log().Warn("redislimit: failed releases given up: their slots come back when their holds expire",
			"limiter", c.name, "releases", n, "hold_expiry", time.Duration(c.expiryNs))
	}
}

// release gives back h's slots in one script call (none if a renewal found
// the hold gone), and wakes the first waiter of its key here.
func (c *Concurrency) release(h *concHold) {
	c.mu.Lock()
	delete(c.holds, h)
	c.mu.Unlock()
	if !h.lost.Load() {
		if _, err := c.call(context.Background(), modeRelease, h.key, h.id, 1, 1); err != nil {
			c.queueRelease(h.key, h.id, false)
		}
	}
	// The hold time, into the moving average (weight 1/8), for estimate.
	d := max(c.clock.now()-h.at, 1)
	for {
		old := c.holdNs.Load()
		next := d
		if old != 0 {
			next = old + (d-old)/8
		}
		if c.holdNs.CompareAndSwap(old, max(next, 1)) {
			break
		}
	}
	c.wake(h.key)
}

// renew retries the failed releases and renews every live hold of this
// instance each period, until Close, one script call each under ctx, which
// Close cancels: it stops between two calls and within one. A hold past the
// longest hold is left to expire. A renewal that finds a hold gone marks it
// lost and logs it.
func (c *Concurrency) renew(ctx context.Context, period time.Duration) {
	defer close(c.renewed)
	tick, stop := c.clock.ticker(max(period, time.Millisecond/2))
	defer stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
		}
		c.retryReleases(ctx, c.stop)
		c.logDropped()
		c.mu.Lock()
		holds := make([]*concHold, 0, len(c.holds))
		for h := range c.holds {
			holds = append(holds, h)
		}
		c.mu.Unlock()
		now := c.clock.now()
		lost := 0
		for _, h := range holds {
			if ctx.Err() != nil {
				return // Close: the holds left are not renewed
			}
			if c.maxHoldNs > 0 && now-h.at >= c.maxHoldNs {
				continue // Redis lets it expire at the longest hold
			}
			rep, err := c.call(ctx, modeRenew, h.key, h.id, 1, 1)
			if err == nil && !rep.ok {
				h.lost.Store(true)
				c.mu.Lock()
				delete(c.holds, h)
				c.mu.Unlock()
				lost++
			}
		}
		if lost > 0 {
			c.ops.log().Warn("redislimit: holds expired before their renewal (the instance was paused, or Redis out of reach, "+
				"for longer than half the hold expiry): their keys may run above the limit until they are released",
				"limiter", c.name, "holds", lost, "hold_expiry", time.Duration(c.expiryNs))
		}
	}
}
