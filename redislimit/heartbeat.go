package redislimit

import (
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The live fleet (the default failure policy, FailLocal of the fleet's
// size): each limiter announces itself on Redis while Redis answers, in a
// sorted set per prefix (prefix + "#fleet", never a key's state, which is
// prefix{...}), and reads how many instances are announced. While Redis
// fails, the fallback decides on the limit divided by the count read at the
// last good answer. See lua/fleet.lua.
//
// An announcement is sent at most once per fleetPeriod, after a call that
// Redis answered, by a goroutine that ends with it: a limiter that decides
// nothing sends nothing, and one that is never closed leaves no goroutine
// behind. It lives fleetTTL on Redis time, so an instance counts for
// fleetTTL after its last call: an idle or dead instance then drops out,
// and a busy one that misses a few beats (timeouts) stays counted.
const (
	fleetPeriod = 2 * time.Second
	fleetTTL    = 5 * fleetPeriod
	// fleetSoon is the wait before the next announcement after one that
	// failed, or that read a new size (a fleet starting or scaling: the
	// others may not have announced themselves yet).
	fleetSoon = fleetPeriod / 8
	// fleetTimeout is the least time an announcement waits for Redis:
	// nothing waits for it, and on a busy host one that waits only as
	// long as a decision may fail again and again.
	fleetTimeout = time.Second
	// fleetMax bounds the size read from Redis: a larger count (a bug, a
	// forged reply) is this many, which leaves each instance a share of
	// one event or one slot, never more than a smaller count would.
	fleetMax = 1 << 20
)

// fleetBeats is whether the limiters under the default policy announce
// themselves. The package's tests turn it off (export_test.go): most of
// them count the commands a decision sends, or share a prefix between
// limiters that are not a fleet; the tests of the fleet turn it on for
// their limiters (withFleetBeats).
var fleetBeats = true

var (
	//go:embed lua/fleet.lua
	fleetLua string

	fleetScript = redis.NewScript(fleetLua)
)

// The modes of the fleet script, boxed once.
var (
	modeBeat  any = "beat"
	modeLeave any = "leave"
)

// fleet is one limiter's membership of its live fleet.
type fleet struct {
	client  redis.UniversalClient
	key     string // prefix + "#fleet"
	id      string // 16 random hex digits
	timeout time.Duration
	sclock  *scriptClock // the tests' time for the script; nil: Redis's
	ttl     any          // fleetTTL in µs, boxed once
	// size is the count of the last good answer, in [1, fleetMax]; 1 until
	// the first (alone, as far as this instance knows: the whole limit).
	size atomic.Int64
	// next is the local ns at which the next announcement is due;
	// math.MinInt64 before the first, which the first answered call sends.
	next atomic.Int64
	// sent is set by the first announcement: Close then withdraws it.
	sent atomic.Bool
	// changed is told each new size, on the announcing goroutine.
	changed func(n int)

	mu     sync.Mutex // protects closed, and wg's Add against Close's Wait
	closed bool
	wg     sync.WaitGroup // the announcement under way, if any
}

// newFleet returns the membership of the instance in the fleet of the
// limiters whose keys have prefix, calling Redis through client with
// timeout, and changed with each size learned.
func newFleet(client redis.UniversalClient, prefix string, timeout time.Duration, sclock *scriptClock,
	changed func(int)) *fleet {
	var id [8]byte
	_, _ = crand.Read(id[:]) // never fails (crypto/rand's promise since Go 1.24)
	f := &fleet{client: client, key: prefix + "#fleet", id: hex.EncodeToString(id[:]), timeout: timeout,
		sclock: sclock, ttl: int64(fleetTTL / time.Microsecond), changed: changed}
	f.size.Store(1)
	f.next.Store(math.MinInt64)
	return f
}

// instances is the fleet's size as last learned, at least 1.
func (f *fleet) instances() int { return int(f.size.Load()) }

// answered is told that Redis answered a call at local time now: if an
// announcement is due, one goroutine sends it. It costs an atomic load
// when none is.
func (f *fleet) answered(now int64) {
	next := f.next.Load()
	if now < next || !f.next.CompareAndSwap(next, now+int64(fleetPeriod)) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if changed, ok := f.beat(); changed || !ok {
			// Sooner than a period: the next call at or after it sends it.
			f.next.Store(now + int64(fleetSoon))
		}
	}()
}

// beat announces the instance once and learns the fleet's size from the
// reply; a call that fails, or a reply that is no count, changes nothing.
// It reports whether the size changed, and whether the reply was a count.
func (f *fleet) beat() (changed, ok bool) {
	f.sent.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), max(f.timeout, fleetTimeout))
	defer cancel()
	n, ok := fleetCount(f.run(ctx, modeBeat))
	if !ok || f.size.Swap(int64(n)) == int64(n) {
		return false, ok
	}
	if f.changed != nil {
		f.changed(n)
	}
	return true, true
}

// run calls the fleet script in mode and returns its reply (nil if the
// call failed).
func (f *fleet) run(ctx context.Context, mode any) any {
	args := []any{mode, f.id, f.ttl}
	if f.sclock != nil {
		t := f.sclock.c.Now()
		args = append(args, t.Unix(), t.Nanosecond())
	}
	v, err := fleetScript.Run(ctx, f.client, []string{f.key}, args...).Result()
	if err != nil {
		return nil
	}
	return v
}

// fleetCount reads the fleet script's reply: an integer, at least 1 (the
// instance that asked is in it), at most fleetMax (a larger one is
// fleetMax). Anything else is no count.
func fleetCount(v any) (int, bool) {
	n, ok := v.(int64)
	if !ok || n < 1 {
		return 0, false
	}
	return int(min(n, fleetMax)), true
}

// close stops the announcements, waits for the one under way, and
// withdraws the instance from the fleet (one call, within the timeout), so
// that the others count it no longer at their next announcement.
func (f *fleet) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	f.wg.Wait()
	if f.sent.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		f.run(ctx, modeLeave)
	}
}
