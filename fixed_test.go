package keylimit_test

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestFixedWindowSteps(t *testing.T) {
	// 3 per 10 s; the mock clock starts on a window boundary.
	lim, mock := fixedWindow.mock(t, keylimit.Per(3, 10*s))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(3, 3, 0)},
		{0, "take", "a", 1, allowed(3, 2, 10*s)},
		{2 * s, "take", "a", 2, allowed(3, 0, 8*s)},
		{2 * s, "take", "a", 1, refused(3, 0, 8*s, 8*s)},
		{2 * s, "take", "b", 3, allowed(3, 0, 8*s)}, // keys are independent
		{5 * s, "peek", "a", 0, refused(3, 0, 5*s, 5*s)},
		{5 * s, "take", "a", 4, refused(3, 0, keylimit.InfDuration, 5*s)},
		// The refused calls counted nothing; the window ends at exactly 10 s.
		{10*s - 1, "take", "a", 1, refused(3, 0, 1, 1)},
		{10 * s, "take", "a", 1, allowed(3, 2, 10*s)},
		{10 * s, "take", "a", 0, allowed(3, 2, 10*s)},
		{10 * s, "take", "a", -1, refused(3, 2, keylimit.InfDuration, 10*s)},
		{15 * s, "take", "a", 2, allowed(3, 0, 5*s)},
		{15 * s, "reset", "a", 0, keylimit.Result{}},
		{15 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{15 * s, "take", "a", 3, allowed(3, 0, 5*s)},
		// A window with nothing counted is full: ResetAfter 0.
		{45 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{45 * s, "peek", "never-seen", 0, allowed(3, 3, 0)},
	})
	require.Equal(t, 2, lim.Stats().Keys, "peek and refused calls create no key")
}

// TestFixedWindowRefundsOnlyItsWindow: a refund gives back events of the
// window they were admitted in, while it lasts; a window that has ended is
// gone already, and a refund does not take from the next one.
func TestFixedWindowRefundsOnlyItsWindow(t *testing.T) {
	lim, mock := fixedWindow.mock(t, keylimit.PerMinute(3))
	runSteps(t, lim, mock, []step{
		{0, "admit", "k", 3, verdict(true)},
		{time.Minute, "admit", "k", 1, verdict(true)},
		{time.Minute, "refund", "k", 1, keylimit.Result{}}, // the one of this window
		{time.Minute, "peek", "k", 0, allowed(3, 3, 0)},
		{time.Minute, "admit", "k", 3, verdict(true)},
		{time.Minute, "refund", "k", 3, keylimit.Result{}}, // the 3 of the window that ended: gone already
		{time.Minute, "allow", "k", 1, verdict(false)},
	})
}

func TestFixedWindowSetLimitRefusesUntilTheWindowEnds(t *testing.T) {
	lim, mock := fixedWindow.mock(t, keylimit.PerMinute(10))
	t0 := mock.Now()
	mock.Set(t0.Add(15 * s))
	require.True(t, lim.AllowN("k", 8))
	require.NoError(t, lim.SetLimit(keylimit.PerMinute(5)))
	mock.Set(t0.Add(20 * s))
	require.Equal(t, refilled(refused(5, 0, 40*s, 40*s), 40*s), lim.Take("k", 1), "8 counted, above the 5 of the new limit")
	mock.Set(t0.Add(60*s - 1))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.Add(60 * s))
	require.Equal(t, refilled(allowed(5, 0, 60*s), 60*s), lim.Take("k", 5))
}

// TestFixedWindowSetLimitMovesTheWindows pins the rule for a new Period: a
// key moves to the new window that holds now, with its count if its old
// window has not ended.
func TestFixedWindowSetLimitMovesTheWindows(t *testing.T) {
	lim, mock := fixedWindow.mock(t, keylimit.PerMinute(10))
	t0 := mock.Now() // on an hour boundary
	at := func(d time.Duration) { mock.Set(t0.Add(d)) }
	m := time.Minute
	at(30*m + 15*s) // in the minute [30:00, 31:00)
	for _, k := range []string{"a", "b", "c", "d"} {
		require.True(t, lim.AllowN(k, 7))
	}

	// To an hour: the minute's 7 lie in the hour [0:00, 60:00).
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	require.Equal(t, refilled(allowed(100, 93, 29*m+45*s), 29*m+45*s), lim.Peek("a"))

	// To 10 s at 30:40: a's hour and b's minute have not ended: their 7
	// come along into [30:40, 30:50). c, first asked at 31:30, counted its 7
	// in a minute that has ended.
	at(30*m + 40*s)
	require.NoError(t, lim.SetLimit(keylimit.Per(10, 10*s)))
	require.Equal(t, refilled(allowed(10, 3, 10*s), 10*s), lim.Peek("a"))
	require.Equal(t, refilled(allowed(10, 3, 10*s), 10*s), lim.Peek("b"))
	at(31*m + 30*s)
	require.Equal(t, allowed(10, 10, 0), lim.Peek("c"))

	// From an hour to a minute: the hour's count refuses until the minute
	// in which the key moved ends, not beyond.
	require.NoError(t, lim.SetLimit(keylimit.PerHour(100)))
	require.True(t, lim.AllowN("d", 100), "d's minute ended at 31:00")
	require.False(t, lim.Allow("d"))
	require.NoError(t, lim.SetLimit(keylimit.PerMinute(10)))
	require.Equal(t, refilled(refused(10, 0, 30*s, 30*s), 30*s), lim.Take("d", 1), "100 counted in the minute [31:00, 32:00)")
	at(32*m - 1)
	require.False(t, lim.Allow("d"))
	at(32 * m)
	require.True(t, lim.AllowN("d", 10))
}
