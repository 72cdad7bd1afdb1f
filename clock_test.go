package keylimit_test

import (
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
)

// fastClock is a clock for tests that move time by hand from one goroutine
// while many others read it: Now is one atomic load, where clock.Mock takes a
// mutex on every read and sleeps a millisecond on every move. Only Now (and
// Since) follow it; its timers and tickers are an embedded clock.Mock's, which
// never fire, so it suits tests that do not Wait.
type fastClock struct {
	clock.Clock
	ns atomic.Int64 // Unix ns
}

func newFastClock() *fastClock {
	c := &fastClock{Clock: clock.NewMock()}
	c.ns.Store(time.Unix(1e9, 0).UnixNano())
	return c
}

func (c *fastClock) Now() time.Time                  { return time.Unix(0, c.ns.Load()) }
func (c *fastClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *fastClock) Add(d time.Duration)             { c.ns.Add(int64(d)) }
