package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/stretchr/testify/require"
)

// What every limiter type does, tested on all four: the shared behaviour
// suite, and tables that give each type's exact answers to one scenario.

// TestBehaviour runs the shared behaviour suite against every in-memory
// limiter type, on a mock clock. Its contention cases make 300,000 calls
// on one key (a million under -full).
func TestBehaviour(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var mock *clock.Mock
			limitertest.Run(t, limitertest.Harness{
				New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
					mock = clock.NewMock()
					return k.new(l, keylimit.WithClock(mock))
				},
				Advance:     func(d time.Duration) { mock.Add(d) },
				Attempts:    sized(300_000, 1_000_000),
				MaxEvents:   k.maxEvents,
				Approximate: k == slidingCounter,
			})
		})
	}
}

// TestClockStepsBack: each type's exact answers when its clock steps back,
// to before the key's last decision, to before the limiter's creation, and
// far forward. Time does not go back inside a key: no capacity reopens, and
// nothing panics.
func TestClockStepsBack(t *testing.T) {
	for _, tt := range []struct {
		kind  *kind
		limit keylimit.Limit
		steps []step
	}{
		{tokenBucket, keylimit.PerSecond(1).WithBurst(3), []step{
			{10 * s, "take", "k", 3, allowed(3, 0, 3*s)},
			// Back by 5 s: the TAT stays where the admissions left it.
			{5 * s, "take", "k", 1, refused(3, 0, 6*s, 8*s)},
			{farPast, "allow", "k", 1, verdict(false)},
			{farPast, "allow", "fresh", 1, verdict(false)}, // before the creation, even a new key has no tokens
			{10 * s, "allow", "k", 1, verdict(false)},      // stepping back and forth again creates no token
			{11 * s, "allow", "k", 1, verdict(true)},
			{11 * s, "allow", "k", 1, verdict(false)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{fixedWindow, keylimit.PerMinute(3), []step{
			{130 * s, "allow", "k", 3, verdict(true)}, // in the window [120 s, 180 s)
			// Back into the previous window: the key decides in its own
			// window, whose end is now 110 s away. No capacity reopens.
			{70 * s, "take", "k", 1, refused(3, 0, 110*s, 110*s)},
			{70 * s, "peek", "k", 0, refused(3, 0, 110*s, 110*s)},
			{70 * s, "allow", "fresh", 1, verdict(true)}, // a new key has a full window whenever it starts
			{farPast, "allow", "k", 1, verdict(false)},
			{179 * s, "allow", "k", 1, verdict(false)}, // stepping back and forth again reopens nothing
			{180 * s, "allow", "k", 3, verdict(true)},
			{180 * s, "allow", "k", 1, verdict(false)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{slidingWindow, keylimit.PerMinute(3), []step{
			{30 * s, "allow", "k", 1, verdict(true)},
			{100 * s, "allow", "k", 2, verdict(true)},
			{100 * s, "peek", "k", 0, allowed(3, 1, time.Minute)}, // the entry of 30 s has left
			// Back to 20 s: the key keeps deciding at 100 s, its latest
			// time. The entries of 100 s, newer than now, count; no
			// capacity reopens.
			{20 * s, "peek", "k", 0, allowed(3, 1, 140*s)},
			{20 * s, "take", "k", 1, allowed(3, 0, 140*s)}, // recorded at 100 s, not at 20 s
			{20 * s, "take", "k", 1, refused(3, 0, 140*s, 140*s)},
			{farPast, "allow", "k", 1, verdict(false)},
			{160*s - 1, "allow", "k", 1, verdict(false)}, // stepping back and forth reopens nothing
			{160 * s, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{slidingCounter, keylimit.PerMinute(4), []step{
			{90 * s, "allow", "k", 4, verdict(true)},
			{90 * s, "peek", "k", 0, refused(4, 0, 45*s, 90*s)},
			// Back into the previous window: the key decides as at its
			// window's start, 60 s, and waits from there.
			{30 * s, "take", "k", 1, refused(4, 0, 105*s, 150*s)},
			{30 * s, "allow", "fresh", 4, verdict(true)}, // a new key has its full quota whenever it starts
			{farPast, "allow", "k", 1, verdict(false)},
			{90 * s, "peek", "k", 0, refused(4, 0, 45*s, 90*s)}, // stepping back and forth changes nothing
			{135 * s, "allow", "k", 1, verdict(true)},
			{135 * s, "allow", "k", 1, verdict(false)},
			{farFuture, "allow", "k", 4, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
	} {
		t.Run(tt.kind.name, func(t *testing.T) {
			lim, mock := tt.kind.mock(t, tt.limit)
			runSteps(t, lim, mock, tt.steps)
		})
	}
}

// TestAllocs: for a key it has seen, no type allocates in Allow, Take or
// Peek, admitted or refused, on the system clock and on an injected one.
func TestAllocs(t *testing.T) {
	for _, k := range kinds {
		// As loose as the type takes: the calls are admitted.
		loose := keylimit.PerHour(1_000_000)
		if k.maxEvents > 0 {
			loose = keylimit.PerHour(k.maxEvents)
		}
		t.Run(k.name+"/clock=system", func(t *testing.T) {
			testAllocs(t, k.make(t, loose), k.make(t, keylimit.PerHour(1)))
		})
		t.Run(k.name+"/clock=injected", func(t *testing.T) {
			clk := newFastClock()
			testAllocs(t, k.on(t, clk, loose), k.on(t, clk, keylimit.PerHour(1)))
		})
	}
}

// TestOptionErrors: every constructor reports an invalid option; a window
// type reports the limit's own error first.
func TestOptionErrors(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, tt := range []struct {
				limit keylimit.Limit
				opt   keylimit.Option
				err   string
			}{
				{keylimit.PerSecond(1), keylimit.WithClock(nil), "keylimit: WithClock(nil): pass clock.New() for real time"},
				{keylimit.PerSecond(1), keylimit.WithMaxKeys(0), "keylimit: max keys 0 is below 1"},
				{keylimit.PerSecond(1), keylimit.WithEvictionInterval(-time.Second), "keylimit: eviction interval -1s is negative"},
			} {
				lim, err := k.new(tt.limit, tt.opt)
				require.EqualError(t, err, tt.err)
				require.Nil(t, lim)
			}
			if k != tokenBucket { // which reports the option's error first
				_, err := k.new(keylimit.PerSecond(0), keylimit.WithMaxKeys(0))
				require.EqualError(t, err, "keylimit: events 0 is below 1", "the limit's error comes first")
			}
		})
	}
}
