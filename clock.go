package keylimit

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// horizon bounds the times a limiter computes with: now is clamped to
// [-maxSpan, horizon] ns since the limiter's creation. With spans (Burst ×
// interval, Period) at most maxSpan, every sum the limiters form stays below
// 2^62 and cannot overflow. 2^61 ns is about 73 years of uptime.
const horizon = int64(1) << 61

// WithClock makes the limiter read time from c instead of the system's
// monotonic clock. Pass clock.NewMock() in tests to step time by hand:
// every boundary then becomes deterministic. Timers used by Wait come from c
// as well. The limiter's time never goes back: if c steps back, the limiter
// decides as at the latest time it read until c passes it again.
func WithClock(c clock.Clock) Option {
	return optionFunc(func(o *options) {
		if c == nil {
			o.fail(errors.New("keylimit: WithClock(nil): pass clock.New() for real time"))
			return
		}
		o.clock = c
	})
}

// timeSource gives limiters the time as int64 nanoseconds since the limiter's
// creation, so that per-key state fits one word and 0 can mean "never used".
type timeSource struct {
	// injected is the clock from WithClock, or nil for the system clock. The
	// nil case is the fast path: time.Since on a time with a monotonic
	// reading, with no interface call.
	injected clock.Clock
	// timers is injected, or the real clock; Wait sleeps on its timers.
	timers clock.Clock
	// start is the creation instant. For the system clock it carries a
	// monotonic reading, so wall-clock steps never reach the limiter.
	start time.Time
	// startUnix is start in ns since the Unix epoch: windows align to it.
	startUnix int64
	// latest, for an injected clock, is the latest time the limiter has
	// read: its time never goes back, so a clock that steps back is ignored
	// until it passes latest again. Every reading raises it. (The system
	// clock is monotonic, and skips it.)
	latest atomic.Int64
	// afterRead, set by internal tests only, runs after every reading of an
	// injected clock: what other callers do while a call is between its
	// reading and its load of a key's state.
	afterRead func()
}

// init sets t up to read c, or the system clock if c is nil.
func (t *timeSource) init(c clock.Clock) {
	if c == nil {
		now := time.Now()
		t.timers, t.start, t.startUnix = systemClock, now, now.UnixNano()
		return
	}
	now := c.Now()
	t.injected, t.timers, t.start, t.startUnix = c, c, now, now.UnixNano()
}

// now returns ns since creation, clamped to [-maxSpan, horizon]. An injected
// clock may step back, even before the creation: the time now returns does
// not (see latest), so a limiter decides as at the latest time it has seen.
//
// now is too large to inline (time.Since inlines into it), and its call
// costs 20 instructions of a decision's 400: the decide of each limiter
// type reads the system clock as its first case does, by hand, and calls
// now for an injected clock. Keep them in step.
func (t *timeSource) now() int64 {
	if t.injected == nil {
		return clampTime(int64(time.Since(t.start)))
	}
	n := clampTime(int64(t.injected.Now().Sub(t.start)))
	for {
		latest := t.latest.Load()
		if n <= latest {
			n = latest
			break
		}
		if t.latest.CompareAndSwap(latest, n) {
			break
		}
	}
	if t.afterRead != nil {
		t.afterRead()
	}
	return n
}

func clampTime(ns int64) int64 {
	return min(max(ns, -int64(maxSpan)), horizon)
}
