package redislimit

import (
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
