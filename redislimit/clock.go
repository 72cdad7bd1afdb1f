package redislimit

import (
	"time"

	"github.com/benbjohnson/clock"
)

// localClock is this process's time, which only the deny cache, the failure
// backoff, the fallback limiter, leases and WaitN's sleeps use: decisions
// made by Redis are made on Redis time.
// Only durations are formed from it (how long ago Redis refused a key), so
// instances whose wall clocks disagree by minutes still agree.
type localClock struct {
	// injected is the clock from WithClock, or nil for the system clock,
	// read through start's monotonic reading so wall-clock steps never
	// reach it.
	injected clock.Clock
	start    time.Time
}

func newLocalClock(c clock.Clock) localClock {
	if c == nil {
		return localClock{start: time.Now()}
	}
	return localClock{injected: c, start: c.Now()}
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

// now returns ns since the limiter's creation.
func (c *localClock) now() int64 {
	if c.injected == nil {
		return int64(time.Since(c.start))
	}
	return int64(c.injected.Now().Sub(c.start))
}
