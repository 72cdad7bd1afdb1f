package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// What the window types share: windows aligned to the Unix epoch, and the
// caps each type's packed state puts on a limit.

// TestBoundaryFixedVersusSliding is the boundary weakness of fixed windows:
// with 10 a minute, 10 requests 100 ms before a boundary and 10 more 200 ms
// later all pass a FixedWindow. A SlidingWindow refuses the second 10 until
// the first leave its window, 60 s after they came: 59.8 s after the second
// 10. The SlidingCounter's estimate refuses them too, but lets the first
// through again after 5.9 s (it counts the previous window's 10 as if spread
// over that window).
func TestBoundaryFixedVersusSliding(t *testing.T) {
	mock := clock.NewMock() // starts at the Unix epoch, on a minute boundary
	l := keylimit.PerMinute(10)
	fixed := fixedWindow.make(t, l, keylimit.WithClock(mock))
	sliding := slidingWindow.make(t, l, keylimit.WithClock(mock))
	counter := slidingCounter.make(t, l, keylimit.WithClock(mock))

	boundary := mock.Now().Add(time.Minute)
	mock.Set(boundary.Add(-100 * ms))
	for i := range 10 {
		require.True(t, fixed.Allow("k"), "fixed, request %d before the boundary", i+1)
		require.True(t, sliding.Allow("k"), "sliding, request %d before the boundary", i+1)
		require.True(t, counter.Allow("k"), "counter, request %d before the boundary", i+1)
	}
	mock.Set(boundary.Add(100 * ms))
	for i := range 10 {
		require.Equal(t, refilled(allowed(10, 9-i, time.Minute-100*ms), time.Minute-100*ms), fixed.Take("k", 1), "fixed, request %d after the boundary", i+1)
		require.Equal(t, refilled(refused(10, 0, 59800*ms, 59800*ms), 59800*ms), sliding.Take("k", 1), "sliding, request %d after the boundary", i+1)
		require.Equal(t, refilled(refused(10, 0, 5900*ms, 59900*ms), 5900*ms), counter.Take("k", 1), "counter, request %d after the boundary", i+1)
	}
}

func TestFixedWindowAlignsToTheEpoch(t *testing.T) {
	// Windows start on multiples of Period since the Unix epoch, wherever
	// the limiter was created, before the epoch as well as after it.
	for _, created := range []time.Time{
		time.Unix(90, 0),                  // 1:30 after the epoch
		time.Unix(-90, 0),                 // 1:30 before it
		time.Unix(1_700_000_030, 5).UTC(), // 30 s and 5 ns into a minute
	} {
		mock := clock.NewMock()
		mock.Set(created)
		lim := fixedWindow.make(t, keylimit.PerMinute(1), keylimit.WithClock(mock))
		// Truncate rounds down since year 1, a whole number of minutes
		// before the epoch.
		boundary := created.Truncate(time.Minute).Add(time.Minute)
		left := boundary.Sub(created)
		require.Equal(t, refilled(allowed(1, 0, left), left), lim.Take("k", 1), "created at %v", created)
		mock.Set(boundary.Add(-1))
		require.False(t, lim.Allow("k"), "1 ns before the boundary, created at %v", created)
		mock.Set(boundary)
		require.True(t, lim.Allow("k"), "on the boundary, created at %v", created)
	}
}

func TestWindowLimits(t *testing.T) {
	tests := []struct {
		name string
		kind *kind
		l    keylimit.Limit
		err  string // substring; "" means valid
	}{
		{"fixed 3/ns", fixedWindow, keylimit.Per(3, 1), ""},
		{"fixed 4/ns", fixedWindow, keylimit.Per(4, 1), "keylimit: a FixedWindow counts at most 3 events per 1ns, not 4"},
		{"fixed 2^32-1/s", fixedWindow, keylimit.PerSecond(1<<32 - 1), ""},
		{"fixed 2^32/s", fixedWindow, keylimit.PerSecond(1 << 32), "at most 4294967295 events per 1s"},
		{"fixed longest period", fixedWindow, keylimit.Per(1<<30, 1<<60), ""},
		{"fixed ignores burst", fixedWindow, keylimit.PerSecond(5).WithBurst(1), ""},
		{"fixed zero period", fixedWindow, keylimit.Per(5, 0), "keylimit: period 0s is not positive"},
		{"sliding cap", slidingWindow, keylimit.PerHour(keylimit.MaxSlidingWindowEvents), ""},
		{"sliding above cap", slidingWindow, keylimit.PerHour(keylimit.MaxSlidingWindowEvents + 1),
			"keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 10001: use a SlidingCounter"},
		{"sliding 1/ns", slidingWindow, keylimit.Per(1, 1), ""},
		{"sliding zero events", slidingWindow, keylimit.PerHour(0), "keylimit: events 0 is below 1"},
		{"counter 65535/s", slidingCounter, keylimit.PerSecond(65_535), ""},
		{"counter 65536/s", slidingCounter, keylimit.PerSecond(65_536),
			"keylimit: a SlidingCounter counts at most 65535 events per 1s, not 65536: use a longer Period, or a FixedWindow or TokenBucket"},
		{"counter 524287/min", slidingCounter, keylimit.PerMinute(524_287), ""},
		{"counter 524288/min", slidingCounter, keylimit.PerMinute(524_288), "at most 524287 events per 1m0s"},
		{"counter 4194303/h", slidingCounter, keylimit.PerHour(4_194_303), ""},
		{"counter 4194304/h", slidingCounter, keylimit.PerHour(4_194_304), "at most 4194303 events per 1h0m0s"},
		{"counter 16777215/day", slidingCounter, keylimit.Per(16_777_215, 24*time.Hour), ""},
		{"counter 16777216/day", slidingCounter, keylimit.Per(16_777_216, 24*time.Hour), "at most 16777215 events per 24h0m0s"},
		{"counter negative burst", slidingCounter, keylimit.PerSecond(5).WithBurst(-1), "keylimit: burst -1 is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := tt.kind.new(tt.l)
			if tt.err == "" {
				require.NoError(t, err)
				require.NoError(t, lim.Close())
				return
			}
			require.ErrorContains(t, err, tt.err)
			require.Nil(t, lim)
		})
	}
}
