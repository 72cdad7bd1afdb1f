package redislimit

import (
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// WithScriptClock makes the scripts decide on c's time instead of Redis
// server time, for the tests that step a clock (the behaviour suite). It
// exists only in the package's tests.
func WithScriptClock(c clock.Clock) Option { return withScriptClock(c) }

// WithScriptClocks is WithScriptClock(script), with the calendar windows'
// parameters made on calendar's time: a caller whose clock is not Redis's.
func WithScriptClocks(script, calendar clock.Clock) Option {
	return optionFunc(func(o *options) { o.scriptClock = &scriptClock{c: script, calendar: calendar} })
}

// SweepLeases runs lim's lease sweeper once, now, as its ticker would: the
// tests on a mock clock call it rather than wait for the ticker's goroutine.
func SweepLeases(lim keylimit.Limiter[string]) { limiterOf(lim).leases.sweepOnce() }

// LeaseHeld returns the events key's lease in lim holds now, 0 if it has
// no live lease.
func LeaseHeld(lim keylimit.Limiter[string], key string) int {
	l := limiterOf(lim)
	e, ok := l.leases.m.Load(key)
	if !ok {
		return 0
	}
	p := e.cur.Load()
	if p == nil || p.over(l.clock.now(), &l.clock) {
		return 0
	}
	return int(max(p.left.Load(), 0))
}

// PersistenceRisk is persistenceRisk, for the tests of what counts as a
// server that keeps nothing on disk.
func PersistenceRisk(save, aof map[string]string) error { return persistenceRisk(save, aof) }

// PendingReleasesMax is how many failed releases a Concurrency keeps for
// retry.
const PendingReleasesMax = concPendingMax

func init() { fleetBeats = false } // see fleetBeats

// WithFleetBeats makes a limiter announce itself on Redis under the
// default policy, or not: the package's tests turn announcements off
// unless they test them.
func WithFleetBeats(on bool) Option { return withFleetBeats(on) }

// fleetOf returns lim's membership of its live fleet, nil if it has none.
func fleetOf(lim any) *fleet {
	if c, ok := lim.(*Concurrency); ok {
		return c.guard.fleet
	}
	return limiterOf(lim.(keylimit.Limiter[string])).guard.fleet
}

// Announce announces lim on Redis now, as its next announcement would, and
// returns the fleet's size it knows after it (its last good answer).
func Announce(lim any) int {
	f := fleetOf(lim)
	f.beat()
	return f.instances()
}

// FleetSize returns the fleet's size lim knows, 0 if it learns none.
func FleetSize(lim any) int {
	if f := fleetOf(lim); f != nil {
		return f.instances()
	}
	return 0
}

// FleetKey returns the Redis key of lim's live fleet.
func FleetKey(lim any) string { return fleetOf(lim).key }

// FleetCount is fleetCount, for its fuzz target.
func FleetCount(v any) (int, bool) { return fleetCount(v) }

// FleetTTL and FleetPeriod are how long an announcement lives and how
// often one is sent.
const (
	FleetTTL    = fleetTTL
	FleetPeriod = fleetPeriod
	FleetMax    = fleetMax
)

// LeasePeriod is the lease period the share rule grants a fleet of n
// instances on one key of l with leases of d: d, or minShare × n × l's
// interval if that is longer (lua/bucket.lua's paced).
func LeasePeriod(d time.Duration, n int, l keylimit.Limit) time.Duration {
	return max(d, time.Duration(minShare*n)*l.WithBurst(1).FillTime())
}

// SweeperWakes waits until lim's lease sweeper sleeps with nothing
// pending (no timer of its due, no remind unread), or has stopped, and
// returns how many times it has woken, and whether it runs: the tests on a
// mock clock count its wake-ups.
func SweeperWakes(lim keylimit.Limiter[string]) (int64, bool) {
	l := limiterOf(lim)
	ls := l.leases
	for {
		w := ls.wakes.Load()
		if !ls.running.Load() {
			return w, false
		}
		mono := ls.monoNext.Load()
		if ls.parked.Load() != nil && ls.kicks.Load() == ls.kicked.Load() && len(ls.kick) == 0 && ls.next.Load() > l.clock.now() &&
			(mono == never || mono > l.clock.monoNow()) && ls.wakes.Load() == w {
			return w, true
		}
		time.Sleep(time.Millisecond)
	}
}

// SweeperRuns reports whether lim's lease sweeper runs, now.
func SweeperRuns(lim keylimit.Limiter[string]) bool { return limiterOf(lim).leases.running.Load() }

// SweeperWakeCount is how many times lim's lease sweeper has woken, now.
func SweeperWakeCount(lim keylimit.Limiter[string]) int64 { return limiterOf(lim).leases.wakes.Load() }

// UnspentLeaseCount is how many of lim's leases its sweeper has ended
// holding events (and given them back), now.
func UnspentLeaseCount(lim keylimit.Limiter[string]) int64 {
	return limiterOf(lim).leases.unspent.Load()
}

// HashSlot is hashSlot: the Redis Cluster slot of a key, which the
// coalescer groups a Cluster's takes by.
func HashSlot(key string) uint16 { return hashSlot(key) }
