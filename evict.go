package keylimit

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit/internal/keystore"
)

// Eviction: a limiter forgets a key once the key's state is indistinguishable
// from a key never seen (a full bucket, an empty window), so forgetting it
// never changes a decision. A background goroutine sweeps the keys every
// eviction interval; the key cap (WithMaxKeys) sweeps on demand.
//
// A sweep retires each idle state by CAS before it removes it from the map
// (stateHooks.retireIfIdle): an admission racing with the sweep either
// lands first, and the state is no longer idle and stays, or meets the
// retired state and starts over on a fresh one. No event is admitted twice
// and none is lost.

const (
	minTime = keystore.MinTime
	maxTime = keystore.MaxTime
)

// WithEvictionInterval sets how often, in real time, the limiter sweeps out
// idle keys (whether a key is idle is judged on the limiter's clock). The
// default is derived from the limit: the time a key takes to go idle (the
// bucket's Burst × Interval, the window's Period), kept between 10 s and 10
// min. A sweep visits every key without stopping the others: Allow on an
// existing key never waits for it.
//
// d == 0 turns background eviction off: keys then stay until Reset, or
// until the key cap (WithMaxKeys) needs their place. A negative d is an error.
func WithEvictionInterval(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d < 0 {
			o.fail(fmt.Errorf("keylimit: eviction interval %v is negative", d))
			return
		}
		o.evictEvery, o.evictSet = d, true
	})
}

// WithMaxKeys caps the number of keys the limiter tracks at n, which bounds
// its memory under a flood of distinct keys (an attacker rotating IPs or API
// keys).
//
// At the cap, a new key first makes room by a sweep: keys that can go without
// changing any decision go. If none can, the new key is not tracked, and the
// limiter decides for it by its overflow policy: by default it refuses it,
// with Result.Untracked set so that a caller can tell this refusal from a
// rate limit (an HTTP server may answer 503 rather than 429); with
// WithAdmitUntracked it admits it without counting. Either way, the keys
// already tracked keep their state: a flood of new keys never resets the
// limit of a key in use.
func WithMaxKeys(n int) Option {
	return optionFunc(func(o *options) {
		if n < 1 {
			o.fail(fmt.Errorf("keylimit: max keys %d is below 1", n))
			return
		}
		o.maxKeys = n
	})
}

// WithAdmitUntracked makes a limiter at its key cap (WithMaxKeys) admit the
// requests of keys it cannot track, instead of refusing them. Those requests
// are not counted, so a client whose key is not tracked is not limited: this
// chooses availability for new clients over protection when the cap is full.
// Their Results have Untracked set.
func WithAdmitUntracked() Option {
	return optionFunc(func(o *options) { o.overflow = admitUntracked })
}

// overflowPolicy says what a limiter at its key cap does with a key it
// cannot track.
type overflowPolicy uint8

const (
	refuseUntracked overflowPolicy = iota
	admitUntracked
)

// defaultEvictionInterval derives the sweep interval from span, the time a
// key takes to go idle after its last admission.
func defaultEvictionInterval(span time.Duration) time.Duration {
	return min(max(span, 10*time.Second), 10*time.Minute)
}

// untracked is the Result for a request of n events whose key the limiter
// cannot track (see WithMaxKeys). quota is the limiter's Result.Limit.
func (s *shard[K, S]) untracked(quota, n int) Result {
	if s.overflow == admitUntracked {
		return Result{Allowed: true, Limit: quota, Remaining: quota - n, Untracked: true}
	}
	// The earliest a tracked key can go idle, as of the last sweep, is when
	// a place may free up; if unknown, suggest a second.
	retry := time.Second
	if next := s.nextIdle.Load(); next != minTime && next != maxTime {
		retry = time.Duration(max(next-s.clock.now(), 0))
	}
	return Result{Limit: quota, RetryAfter: retry, Untracked: true}
}

// sweep retires and removes every idle key. The caller holds sweepMu.
//
// It also leaves in nextIdle the earliest time a remaining key could go idle.
// A key inserted during the sweep stores minTime there ("unknown: sweeping
// may help"), and the sweep's CAS from maxTime then fails, so the hint is
// never later than the truth.
func (s *shard[K, S]) sweep() (evicted int) {
	s.nextIdle.Store(maxTime)
	now := s.clock.now()
	next := int64(maxTime)
	s.m.Range(func(h uint64, p *S) bool {
		if retired, idleAt := s.hooks.retireIfIdle(p, now); retired {
			s.remove(h, p)
			evicted++
		} else {
			next = min(next, idleAt)
		}
		return true
	})
	s.nextIdle.CompareAndSwap(maxTime, next)
	s.counts.evicted.Add(uint64(evicted))
	return evicted
}

// evictor is the handle a limiter keeps on its background sweeper.
type evictor struct {
	stop chan struct{}
	once sync.Once
}

// close stops the sweeper; it may be called more than once.
func (e *evictor) close() {
	if e != nil {
		e.once.Do(func() { close(e.stop) })
	}
}

// startEvictor starts the background sweeper of s, which belongs to the
// limiter owner, every o.evictEvery or the default derived from span. The
// goroutine holds s but not owner; a cleanup attached to owner stops it once
// owner is unreachable, so a limiter dropped without Close leaks nothing.
func startEvictor[T any, K comparable, S any](owner *T, s *shard[K, S], o options, span time.Duration) *evictor {
	every := defaultEvictionInterval(span)
	if o.evictSet {
		every = o.evictEvery
	}
	if every == 0 {
		return nil
	}
	e := &evictor{stop: make(chan struct{})}
	runtime.AddCleanup(owner, (*evictor).close, e)
	// Sweeps are paced by real time even when the limiter's clock is
	// injected: eviction is housekeeping, not a decision, and a mock clock
	// moved a year ahead must not run a year of sweeps. Whether a key is
	// idle is judged on the limiter's own clock.
	ticker := time.NewTicker(every)
	go func() {
		defer ticker.Stop()
		for {
			select {
			case <-e.stop:
				return
			case <-ticker.C:
				s.sweepMu.Lock()
				s.sweep()
				s.sweepMu.Unlock()
			}
		}
	}()
	return e
}

// capQuiet is the least time, on the limiter's clock, between two starts of
// key cap episodes logged: a limiter that sits at its cap while keys come
// and go starts and ends an episode at every other new key, and is logged
// once per period, with a count of the episodes it left out.
const capQuiet = int64(time.Minute)

// capLog is where the key cap's log lines stand. atCap is set while the cap
// leaves new keys untracked; the rest, under mu, changes only when atCap
// does.
type capLog struct {
	atCap    atomic.Bool
	mu       sync.Mutex
	logged   bool  // the episode under way was logged, and so its end will be
	last     int64 // the limiter's time of the last start logged, if any was (anyLogged)
	any      bool
	unlogged int // episodes started since the last start logged
}

// capReached notes that the key cap left a new key untracked, and logs the
// start of the episode, at most once per capQuiet.
func (s *shard[K, S]) capReached() {
	c := &s.capLog
	if c.atCap.Load() || !c.atCap.CompareAndSwap(false, true) {
		return
	}
	now := s.clock.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logged = !c.any || now-c.last >= capQuiet || now < c.last
	if !c.logged {
		c.unlogged++
		return
	}
	args := []any{"max_keys", s.maxKeys, "admit_untracked", s.overflow == admitUntracked}
	if c.unlogged > 0 {
		args = append(args, "episodes_not_logged", c.unlogged)
	}
	c.last, c.any, c.unlogged = now, true, 0
	s.log().Warn("keylimit: the key cap is reached: new keys are not tracked, and the overflow policy decides for them", args...)
}

// capRelieved notes that a new key was tracked, and logs the end of an
// episode whose start was logged, once.
func (s *shard[K, S]) capRelieved() {
	c := &s.capLog
	if !c.atCap.Load() || !c.atCap.CompareAndSwap(true, false) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logged {
		c.logged = false
		s.log().Info("keylimit: the key cap has room again: new keys are tracked",
			"max_keys", s.maxKeys, "untracked_so_far", s.counts.untracked.Load())
	}
}

func (s *shard[K, S]) log() *slog.Logger {
	if s.logger != nil {
		return s.logger
	}
	return slog.Default()
}
