package keylimit_test

import (
	"fmt"
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

// TestClockStepsBack: each type's exact answers when its injected clock
// steps back, to before a key's last decision, to before the limiter's
// creation, and far forward. A limiter's time never goes back: it decides as
// at the latest time it has read, so no capacity reopens, a new key is full
// whenever it comes, and nothing panics.
func TestClockStepsBack(t *testing.T) {
	for _, tt := range []struct {
		kind  *kind
		limit keylimit.Limit
		steps []step
	}{
		{tokenBucket, keylimit.PerSecond(1).WithBurst(3), []step{
			{10 * s, "take", "k", 3, allowed(3, 0, 3*s)},
			{5 * s, "take", "k", 1, refused(3, 0, 1*s, 3*s)}, // back by 5 s: decided at 10 s
			{farPast, "allow", "k", 1, verdict(false)},
			{farPast, "allow", "fresh", 1, verdict(true)}, // a new key is full whenever it comes
			{10 * s, "allow", "k", 1, verdict(false)},     // stepping back and forth creates no token
			{11 * s, "allow", "k", 1, verdict(true)},
			{11 * s, "allow", "k", 1, verdict(false)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{fixedWindow, keylimit.PerMinute(3), []step{
			{130 * s, "allow", "k", 3, verdict(true)},           // in the window [120 s, 180 s)
			{70 * s, "take", "k", 1, refused(3, 0, 50*s, 50*s)}, // back into the previous window: decided at 130 s
			{70 * s, "peek", "k", 0, refused(3, 0, 50*s, 50*s)}, // no capacity reopens
			{70 * s, "allow", "fresh", 1, verdict(true)},        // a new key has a full window whenever it comes
			{farPast, "allow", "k", 1, verdict(false)},
			{179 * s, "allow", "k", 1, verdict(false)},
			{180 * s, "allow", "k", 3, verdict(true)},
			{180 * s, "allow", "k", 1, verdict(false)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{slidingWindow, keylimit.PerMinute(3), []step{
			{30 * s, "allow", "k", 1, verdict(true)},
			{100 * s, "allow", "k", 2, verdict(true)},
			{100 * s, "peek", "k", 0, allowed(3, 1, time.Minute)}, // the entry of 30 s has left
			{20 * s, "peek", "k", 0, allowed(3, 1, time.Minute)},  // back to 20 s: decided at 100 s
			{20 * s, "take", "k", 1, allowed(3, 0, time.Minute)},  // recorded at 100 s
			{20 * s, "take", "k", 1, refused(3, 0, time.Minute, time.Minute)},
			{farPast, "allow", "k", 1, verdict(false)},
			{160*s - 1, "allow", "k", 1, verdict(false)},
			{160 * s, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 3, verdict(true)},
			{farFuture, "allow", "k", 1, verdict(false)},
		}},
		{slidingCounter, keylimit.PerMinute(4), []step{
			{90 * s, "allow", "k", 4, verdict(true)},
			{90 * s, "peek", "k", 0, refused(4, 0, 45*s, 90*s)},
			{30 * s, "take", "k", 1, refused(4, 0, 45*s, 90*s)}, // back into the previous window: decided at 90 s
			{30 * s, "allow", "fresh", 4, verdict(true)},        // a new key has its full quota whenever it comes
			{farPast, "allow", "k", 1, verdict(false)},
			{90 * s, "peek", "k", 0, refused(4, 0, 45*s, 90*s)},
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

// TestEvictionThenClockStepsBack: a key forgotten once idle, and then asked
// with the clock stepped back to before it went idle, is answered as a key
// that was kept: forgetting never changes a decision. So is a new key asked
// with the clock three hours before the limiter's creation, by every type.
func TestEvictionThenClockStepsBack(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			l := keylimit.PerMinute(3)
			mock := clock.NewMock()
			t0 := mock.Now()
			swept := k.make(t, l, keylimit.WithClock(mock), keylimit.WithMaxKeys(1), keylimit.WithEvictionInterval(0))
			kept := k.make(t, l, keylimit.WithClock(mock), keylimit.WithEvictionInterval(0))
			both := func(what string, f func(lim limiter) keylimit.Result) {
				t.Helper()
				require.Equal(t, f(kept), f(swept), what)
			}
			mock.Set(t0.Add(-3 * time.Hour))
			both("a new key, 3 h before the creation", func(lim limiter) keylimit.Result { return lim.Take("early", 3) })
			require.True(t, kept.Peek("early").Remaining == 0, "the new key admitted its 3")
			mock.Set(t0.Add(2 * time.Minute))
			both("k spends its quota", func(lim limiter) keylimit.Result { return lim.Take("k", 3) }) // swept: early, idle, goes
			mock.Set(t0.Add(10 * time.Minute))                                                        // k is idle
			both("another key", func(lim limiter) keylimit.Result { return lim.Take("other", 1) })    // swept: k goes
			swept.Reset("other")
			kept.Reset("other")
			require.Zero(t, swept.Stats().Keys, "k was forgotten")
			require.Equal(t, 2, kept.Stats().Keys, "early and k were kept")
			// Back to 20 s after k spent its quota: a kept k is still
			// (mostly) spent; a forgotten one must be too, not a fresh key.
			mock.Set(t0.Add(2*time.Minute + 20*s))
			for i := range 4 {
				both(fmt.Sprintf("take %d, the clock stepped back", i), func(lim limiter) keylimit.Result { return lim.Take("k", 1) })
			}
			require.False(t, swept.Peek("k").Allowed, "k, forgotten, is spent")
			both("peek", func(lim limiter) keylimit.Result { return lim.Peek("k") })
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

// TestRefundIsBoundToItsKey: an Admission gives back only to the key it was
// made for. Refund(kb, an Admission of ka) gives back nothing, to either
// key, on every type, and also after a change of limit moved the keys to
// new states (which a window type's refund follows by key); ka's own
// Refund then still gives back.
func TestRefundIsBoundToItsKey(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, move := range []bool{false, true} {
				lim, _ := k.mock(t, keylimit.PerHour(10))
				refunder := lim.(keylimit.Refunder[string])
				_, a := refunder.Admit("ka", 4)
				require.True(t, lim.AllowN("kb", 3))
				if move {
					// 20 an hour: a bucket of the same Interval, whose refunds
					// count in the same unit, and windows of the same Period.
					next := keylimit.PerHour(20)
					if k == tokenBucket {
						next = keylimit.PerHour(10).WithBurst(20)
					}
					require.NoError(t, lim.(interface{ SetLimit(keylimit.Limit) error }).SetLimit(next))
					require.Equal(t, 16, lim.Peek("ka").Remaining, "move %v: ka under the new limit", move)
				}
				quota := lim.Peek("kb").Remaining + 3
				refunder.Refund("kb", a)
				require.Equal(t, quota-3, lim.Peek("kb").Remaining, "move %v: kb after a Refund with ka's Admission", move)
				require.Equal(t, quota-4, lim.Peek("ka").Remaining, "move %v: ka after a Refund of its Admission to kb", move)
				refunder.Refund("ka", a)
				require.Equal(t, quota, lim.Peek("ka").Remaining, "move %v: ka after its own Refund", move)
			}
		})
	}
}
