package redislimit

import (
	"time"

	"github.com/benbjohnson/clock"
)

// Local times are ns since the limiter's creation, clamped to [-maxSpan,
// maxLocal], and every span added to one (a backoff, a lease time, a
// RetryAfter) is at most maxSpan first: so a local time plus two spans is
// at most 2^62 and never wraps. 2^61 ns is about 73 years of uptime.
const (
	maxLocal = int64(1) << 61
	maxSpan  = int64(1) << 60
)

// clampSpan is d in ns, within [0, maxSpan]: what may be added to a local
// time.
func clampSpan(d time.Duration) int64 { return min(max(int64(d), 0), maxSpan) }

// clampLocal is ns within [-maxSpan, maxLocal].
func clampLocal(ns int64) int64 { return min(max(ns, -maxSpan), maxLocal) }

// localClock is this process's time, which the deny cache, the failure
// backoff, the fallback limiter, leases and WaitN's sleeps use: decisions
// made by Redis are made on Redis time. Only durations are formed from it
// (how long ago Redis refused a key), so instances whose wall clocks
// disagree by minutes still agree.
//
// An injected clock may stop or step back, and local time with it: what it
// times then errs towards refusing (a refusal remembered, the backoff, a
// lease's wait last longer), and a lease, which admits, ends on the
// system's monotonic clock too (grant.over). DESIGN.md, "Local time", says
// why local time is not held from going back, as a keylimit limiter's is.
type localClock struct {
	// injected is the clock from keylimit.WithClock, or nil for the system clock,
	// read through start's monotonic reading so wall-clock steps never
	// reach it.
	injected clock.Clock
	start    time.Time
	// mono is the system clock's reading at the creation, with its
	// monotonic reading: leases end on it too (see monoNow).
	mono time.Time
}

// init sets c up to read inj, or the system clock if inj is nil.
func (c *localClock) init(inj clock.Clock) {
	c.mono = time.Now()
	c.injected, c.start = inj, c.mono
	if inj != nil {
		c.start = inj.Now()
	}
}

// ticker returns a channel that ticks every d on this clock, and a
// function that stops it.
func (c *localClock) ticker(d time.Duration) (<-chan time.Time, func()) {
	if c.injected == nil {
		t := time.NewTicker(d)
		return t.C, t.Stop
	}
	t := c.injected.Ticker(d)
	return t.C, t.Stop
}

// now returns ns since the limiter's creation, clamped (clampLocal).
func (c *localClock) now() int64 {
	if c.injected == nil {
		return clampLocal(int64(time.Since(c.start)))
	}
	return clampLocal(int64(c.injected.Now().Sub(c.start)))
}

// monoNow returns ns since the limiter's creation on the system's monotonic
// clock, whatever keylimit.WithClock gave, clamped as now is. With no injected
// clock it is now.
func (c *localClock) monoNow() int64 { return clampLocal(int64(time.Since(c.mono))) }

// timer returns a channel that receives once, d from now on this clock,
// and a function that stops it.
func (c *localClock) timer(d time.Duration) (<-chan time.Time, func() bool) {
	if c.injected == nil {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	t := c.injected.Timer(d)
	return t.C, t.Stop
}
