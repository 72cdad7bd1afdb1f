package keylimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// scriptedClock is a clock whose readings a test gives in advance: Now
// returns the next of them, and once they are used up the last again. It
// counts its readings.
type scriptedClock struct {
	clock.Clock // timers: a Mock that never moves
	mu          sync.Mutex
	next        []time.Time
	last        time.Time
	readings    int
}

func newScriptedClock(at time.Time) *scriptedClock {
	return &scriptedClock{Clock: clock.NewMock(), last: at}
}

func (c *scriptedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readings++
	if len(c.next) > 0 {
		c.last, c.next = c.next[0], c.next[1:]
	}
	return c.last
}

// then sets the readings to come and zeroes the count.
func (c *scriptedClock) then(ts ...time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next, c.readings = ts, 0
}

func (c *scriptedClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readings
}

// TestRefusalReadsTheClockOnce pins the cost of a refusal: one reading of
// the clock, as an admission takes, however near the refusal is to passing.
// A call reads the clock before it loads the key's state, and a refusal on
// a state that did not move between the two is the state at that reading,
// the call's own time: it stands, though a reading later in the call (600
// ms later here, when the key has room again) would admit. (A state that
// moved is decided again: TestStaleReadingOnAMovedStateIsReadAgain.) Two
// readings made a refusal under a limit of 10 a second cost more than an
// admission.
func TestRefusalReadsTheClockOnce(t *testing.T) {
	start := time.Unix(1e9, 0)
	for _, k := range []*kind{tokenBucket, fixedWindow, slidingWindow, slidingCounter} {
		t.Run(k.name+"/near", func(t *testing.T) {
			clk := newScriptedClock(start)
			lim := k.make(t, keylimit.PerSecond(10), keylimit.WithClock(clk))
			// Empty the key 900 ms into a second of the windows' grid
			// (which starts at the limiter's creation).
			at := start.Add(900 * time.Millisecond)
			clk.then(at)
			require.True(t, lim.Take("k", 10).Allowed)
			// At `at` the key is empty; 600 ms later a bucket has 6 tokens
			// again, a fixed window is in its next second, and a sliding
			// counter's previous second weighs 5 of its 10.
			clk.then(at.Add(time.Millisecond), at.Add(600*time.Millisecond))
			require.False(t, lim.Allow("k"))
			require.Equal(t, 1, clk.count())
		})
		t.Run(k.name+"/far", func(t *testing.T) {
			clk := newScriptedClock(start)
			lim := k.make(t, keylimit.PerHour(1), keylimit.WithClock(clk))
			clk.then(start)
			require.True(t, lim.Allow("k"))
			// Refused for an hour: no second reading could admit it.
			clk.then(start.Add(time.Second), start.Add(time.Hour))
			require.False(t, lim.Allow("k"))
			require.Equal(t, 1, clk.count())
		})
	}
}

// TestHotKeyOnTheSystemClockStaysWithinTheBound calls one key from many
// goroutines on the system clock, whose readings, taken before the key's
// state is loaded, are often older than admissions the state holds (see
// DESIGN.md, "Stale clock readings"), for long enough that the limit
// refills many times over, and counts every admission: none may go beyond
// what the limit allows between the limiter's creation and the end of the
// last call. On a real clock the count is not exact, but the bound is, and
// the runs come within a few events of it (a bucket let 10 events of debt
// too many was caught; 2 too many can pass unseen). The exact counts are
// the injected clock's tests.
func TestHotKeyOnTheSystemClockStaysWithinTheBound(t *testing.T) {
	const (
		events     = 50
		period     = 10 * time.Millisecond
		goroutines = 8
		run        = 150 * time.Millisecond
	)
	l := keylimit.Limit{Events: events, Period: period}
	// bound is the most l admits from start, no later than the limiter's
	// creation, for d: a bucket's burst and a token an Interval; a
	// SlidingWindow's Events in each Period; a FixedWindow's and a
	// SlidingCounter's Events in each window of their grid, aligned to the
	// Unix epoch, that the time overlaps (one more than d/period when start
	// falls late in a window).
	bound := func(k *kind, start time.Time, d time.Duration) int {
		switch k {
		case tokenBucket:
			return events + int(d/l.WithBurst(1).FillTime()) + 1
		case slidingWindow:
			return events * (int(d/period) + 1)
		}
		first, last := start.UnixNano()/int64(period), start.Add(d).UnixNano()/int64(period)
		return events * int(last-first+1)
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			start := time.Now() // no later than the limiter's creation
			lim := k.make(t, l)
			var wg sync.WaitGroup
			admitted := make([]int, goroutines)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for { // at least once, however late the goroutine starts
						for range 64 {
							if lim.Allow("hot") {
								admitted[g]++
							}
						}
						if time.Since(start) >= run {
							return
						}
					}
				}()
			}
			wg.Wait()
			d := time.Since(start) // no earlier than the last decision
			total := 0
			for _, n := range admitted {
				total += n
			}
			require.LessOrEqual(t, total, bound(k, start, d), "admitted in %v", d)
			// The limit was asked far more often than it admits, 512
			// times at least: a limiter that refused everything would
			// pass the bound, not this.
			require.GreaterOrEqual(t, total, events, "admitted in %v", d)
			t.Logf("%d admitted in %v, at most %d", total, d, bound(k, start, d))
		})
	}
}
