package keylimit_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// zone loads a zone of the tz database, which the tests need, once.
func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	if loc, ok := loadedZones.Load(name); ok {
		return loc.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	require.NoError(t, err, "the tests need the tz database (/usr/share/zoneinfo)")
	loadedZones.Store(name, loc)
	return loc
}

var loadedZones sync.Map

// calendarWindow returns a FixedWindow of l on a mock clock set to start.
func calendarWindow(t *testing.T, l keylimit.Limit, start time.Time) (*keylimit.FixedWindow[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	mock.Set(start)
	w, err := keylimit.NewFixedWindow[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w, mock
}

// calStep is a step at an instant: a take of n (or a peek, n 0), and
// the Result it must give.
type calStep struct {
	at   time.Time
	n    int
	want keylimit.Result
}

func runCalendar(t *testing.T, w *keylimit.FixedWindow[string], mock *clock.Mock, key string, steps []calStep) {
	t.Helper()
	for i, st := range steps {
		mock.Set(st.at)
		var got keylimit.Result
		if st.n == 0 {
			got = w.Peek(key)
		} else {
			got = w.Take(key, st.n)
		}
		want := st.want
		if want.Remaining < want.Limit && want.Err == nil {
			want.RefillAfter = want.ResetAfter // a fixed window's quota comes back at its end
		}
		require.Equal(t, want, got, "step %d: at %v take %d", i, st.at, st.n)
	}
}

// TestCalendarMonthEnds: a month's window ends at midnight on the 1st in
// its zone, whatever the month's length: Jan 31 → Feb 1, Feb 28 → Mar 1 in
// 2025, Feb 29 still February in 2024.
func TestCalendarMonthEnds(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Bucharest", "America/New_York"} {
		loc := zone(t, name)
		at := func(y int, m time.Month, d, h, min, s int) time.Time { return time.Date(y, m, d, h, min, s, 0, loc) }
		l := keylimit.PerCalendar(3, keylimit.Monthly, loc)

		t.Run(name+"/2025", func(t *testing.T) {
			w, mock := calendarWindow(t, l, at(2025, 1, 31, 23, 59, 0))
			runCalendar(t, w, mock, "k", []calStep{
				{at(2025, 1, 31, 23, 59, 0), 2, allowed(3, 1, time.Minute)},
				{at(2025, 1, 31, 23, 59, 30), 1, allowed(3, 0, 30*time.Second)},
				{at(2025, 1, 31, 23, 59, 59), 1, refused(3, 0, time.Second, time.Second)},
				{at(2025, 2, 1, 0, 0, 0), 1, allowed(3, 2, 28*24*time.Hour)},
				{at(2025, 2, 28, 23, 59, 59), 2, allowed(3, 0, time.Second)},
				{at(2025, 2, 28, 23, 59, 59), 1, refused(3, 0, time.Second, time.Second)},
				{at(2025, 3, 1, 0, 0, 0), 0, keylimit.Result{Allowed: true, Limit: 3, Remaining: 3}},
				{at(2025, 3, 1, 0, 0, 0), 3, allowed(3, 0, at(2025, 4, 1, 0, 0, 0).Sub(at(2025, 3, 1, 0, 0, 0)))},
			})
		})
		t.Run(name+"/2024", func(t *testing.T) {
			w, mock := calendarWindow(t, l, at(2024, 2, 28, 23, 0, 0))
			runCalendar(t, w, mock, "k", []calStep{
				{at(2024, 2, 28, 23, 0, 0), 3, allowed(3, 0, 25*time.Hour)},
				{at(2024, 2, 29, 0, 0, 0), 1, refused(3, 0, 24*time.Hour, 24*time.Hour)},
				{at(2024, 2, 29, 23, 59, 59), 1, refused(3, 0, time.Second, time.Second)},
				{at(2024, 3, 1, 0, 0, 0), 1, allowed(3, 2, at(2024, 4, 1, 0, 0, 0).Sub(at(2024, 3, 1, 0, 0, 0)))},
			})
		})
	}
}

// TestCalendarDSTDays: in Europe/Bucharest the day the clock goes forward
// (29 March 2026) is 23 hours and the day it goes back (25 October 2026)
// 25; a daily window is the day, from local midnight to local midnight.
func TestCalendarDSTDays(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	at := func(m time.Month, d, h, min int) time.Time { return time.Date(2026, m, d, h, min, 0, 0, loc) }
	l := keylimit.PerCalendar(2, keylimit.Daily, loc)

	w, mock := calendarWindow(t, l, at(3, 29, 0, 0))
	runCalendar(t, w, mock, "k", []calStep{
		{at(3, 29, 0, 0), 1, allowed(2, 1, 23*time.Hour)},
		{at(3, 29, 23, 0), 1, allowed(2, 0, time.Hour)},
		{at(3, 29, 23, 59), 1, refused(2, 0, time.Minute, time.Minute)},
		{at(3, 30, 0, 0), 1, allowed(2, 1, 24*time.Hour)},
		{at(10, 25, 0, 0), 2, allowed(2, 0, 25*time.Hour)},
		// 03:30 comes twice on 25 October: the second is 24 h from the
		// next midnight, and still the same day.
		{time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), 1, refused(2, 0, 20*time.Hour+30*time.Minute, 20*time.Hour+30*time.Minute)},
		{at(10, 26, 0, 0), 2, allowed(2, 0, 24*time.Hour)},
	})
	start, end := w.LimitOf("k").WindowAt(mock.Now())
	require.Equal(t, at(10, 26, 0, 0).Unix(), start.Unix())
	require.Equal(t, at(10, 27, 0, 0).Unix(), end.Unix())
}

// TestCalendarDSTHours: an hourly window is an hour of the zone's clock.
// The hour the clock skips (03:00 EET is 04:00 EEST) has none: 02:xx is
// followed by 04:xx. The hour it repeats (03:00 to 04:00 EEST, then again
// in EET) is one window of two hours, whose count both passes share.
func TestCalendarDSTHours(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	utc := func(m time.Month, d, h, min int) time.Time { return time.Date(2026, m, d, h, min, 0, 0, time.UTC) }
	l := keylimit.PerCalendar(2, keylimit.Hourly, loc)

	w, mock := calendarWindow(t, l, utc(3, 29, 0, 30)) // 02:30 EET
	runCalendar(t, w, mock, "k", []calStep{
		{utc(3, 29, 0, 30), 2, allowed(2, 0, 30*time.Minute)},
		{utc(3, 29, 0, 59), 1, refused(2, 0, time.Minute, time.Minute)},
		{utc(3, 29, 1, 0), 2, allowed(2, 0, time.Hour)},         // 04:00 EEST
		{utc(10, 24, 23, 30), 2, allowed(2, 0, 30*time.Minute)}, // 02:30 EEST
		{utc(10, 25, 0, 0), 1, allowed(2, 1, 2*time.Hour)},      // 03:00 EEST: until 04:00 EET
		{utc(10, 25, 0, 59), 1, allowed(2, 0, time.Hour+time.Minute)},
		{utc(10, 25, 1, 30), 1, refused(2, 0, 30*time.Minute, 30*time.Minute)}, // 03:30 EET, the repeat
		{utc(10, 25, 2, 0), 2, allowed(2, 0, time.Hour)},                       // 04:00 EET
	})
}

// TestCalendarWeeks: a week runs from Monday at midnight (ISO 8601), in
// its zone, and the week of a DST change is 167 or 169 hours.
func TestCalendarWeeks(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	at := func(m time.Month, d, h, min, s int) time.Time { return time.Date(2026, m, d, h, min, s, 0, loc) }
	l := keylimit.PerCalendar(1, keylimit.Weekly, loc)

	w, mock := calendarWindow(t, l, at(3, 1, 23, 59, 59)) // a Sunday
	runCalendar(t, w, mock, "k", []calStep{
		{at(3, 1, 23, 59, 59), 1, allowed(1, 0, time.Second)},
		{at(3, 2, 0, 0, 0), 1, allowed(1, 0, 7*24*time.Hour)}, // Monday
		{at(3, 8, 23, 59, 0), 1, refused(1, 0, time.Minute, time.Minute)},
		{at(3, 23, 0, 0, 0), 1, allowed(1, 0, 167*time.Hour)},  // the week of 29 March
		{at(10, 19, 0, 0, 0), 1, allowed(1, 0, 169*time.Hour)}, // the week of 25 October
	})
}

// TestCalendarZoneChange: a tenant's zone comes from SetKeyLimit's
// function; a key whose zone changes (its function asked again, after
// SetKeyLimit or SetLimit) keeps the count of its current window, which
// then ends at the new zone's boundary. So changing zones never gives a key
// a fresh quota.
func TestCalendarZoneChange(t *testing.T) {
	tokyo, newYork := zone(t, "Asia/Tokyo"), zone(t, "America/New_York")
	utc := func(d, h int) time.Time { return time.Date(2026, 6, d, h, 0, 0, 0, time.UTC) }
	var mu sync.Mutex
	zones := map[string]*time.Location{"acme": time.UTC}
	byZone := func(key string) keylimit.Limit {
		mu.Lock()
		defer mu.Unlock()
		return keylimit.PerCalendar(3, keylimit.Daily, zones[key])
	}
	move := func(w *keylimit.FixedWindow[string], loc *time.Location) {
		mu.Lock()
		zones["acme"] = loc
		mu.Unlock()
		require.NoError(t, w.SetKeyLimit(byZone))
	}

	t.Run("east", func(t *testing.T) {
		w, mock := calendarWindow(t, keylimit.PerCalendar(3, keylimit.Daily, nil), utc(10, 20))
		require.NoError(t, w.SetKeyLimit(byZone))
		runCalendar(t, w, mock, "acme", []calStep{{utc(10, 20), 2, allowed(3, 1, 4*time.Hour)}})
		move(w, tokyo) // 05:00 on the 11th in Tokyo: its day ends at 15:00 UTC
		require.Equal(t, tokyo, w.LimitOf("acme").Location)
		runCalendar(t, w, mock, "acme", []calStep{
			{utc(10, 20), 1, allowed(3, 0, 19*time.Hour)},
			{utc(11, 0), 1, refused(3, 0, 15*time.Hour, 15*time.Hour)},
			{utc(11, 15), 3, allowed(3, 0, 24*time.Hour)},
		})
		move(w, time.UTC)
	})
	t.Run("west", func(t *testing.T) {
		w, mock := calendarWindow(t, keylimit.PerCalendar(3, keylimit.Daily, nil), utc(10, 20))
		require.NoError(t, w.SetKeyLimit(byZone))
		runCalendar(t, w, mock, "acme", []calStep{{utc(10, 20), 3, allowed(3, 0, 4*time.Hour)}})
		move(w, newYork) // 16:00 on the 10th in New York: its day ends at 04:00 UTC
		runCalendar(t, w, mock, "acme", []calStep{
			{utc(10, 21), 1, refused(3, 0, 7*time.Hour, 7*time.Hour)},
			{utc(11, 3), 1, refused(3, 0, time.Hour, time.Hour)}, // past UTC's midnight: still New York's day
			{utc(11, 4), 1, allowed(3, 2, 24*time.Hour)},
		})
		move(w, time.UTC)
	})
}

// hopZones are zones of fixed offsets in June 2026, one per offset: 36
// midnights, a day apart in one zone and minutes or an hour from the next.
func hopZones(t testing.TB) []*time.Location {
	names := []string{"UTC", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Kabul", "Asia/Yangon", "Australia/Darwin",
		"Australia/Eucla", "Pacific/Marquesas", "America/St_Johns", "Pacific/Chatham"}
	for h := 1; h <= 14; h++ {
		names = append(names, fmt.Sprintf("Etc/GMT-%d", h)) // east of UTC, as the database names them
		if h <= 12 {
			names = append(names, fmt.Sprintf("Etc/GMT+%d", h))
		}
	}
	var zones []*time.Location
	for _, name := range names {
		zones = append(zones, zone(t, name))
	}
	return zones
}

// nextMidnight returns the first midnight in loc after now.
func nextMidnight(loc *time.Location, now time.Time) time.Time {
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// zoneHops is issue 37.4's tenant: a limit of 10 a day in its zone, spent
// at once, then moved, hops times, to the zone whose midnight comes next,
// spending what it can after each move and at that midnight, for 24 hours
// from 12:00 UTC on 10 June 2026 (in UTC at first). It returns the events
// admitted in those 24 hours by UTC day (the first zone's windows), the
// moves made, and the time at which the key's window ends after the last.
// lim decides on mock; move gives the key another zone.
func zoneHops(t *testing.T, lim keylimit.Limiter[string], mock *clock.Mock, move func(*time.Location), hops int) (map[int]int, int, time.Time) {
	t.Helper()
	start := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	mock.Set(start)
	zones := hopZones(t)
	byDay := map[int]int{}
	spend := func() {
		for range 1000 {
			if !lim.Allow("tenant") {
				return
			}
			byDay[mock.Now().UTC().YearDay()]++
		}
	}
	cur, moves := time.UTC, 0
	spend()
	for moves < hops {
		now := mock.Now()
		next := zones[0]
		for _, z := range zones {
			if z != cur && (next == cur || nextMidnight(z, now).Before(nextMidnight(next, now))) {
				next = z
			}
		}
		cur, moves = next, moves+1
		move(cur)
		spend()
		at := nextMidnight(cur, now)
		if !at.Before(start.Add(24 * time.Hour)) {
			break
		}
		mock.Set(at)
		spend()
	}
	return byDay, moves, mock.Now().UTC().Add(lim.Peek("tenant").ResetAfter)
}

// TestCalendarZoneHopping (issue 37.4): a tenant of 10 a day moved in 24
// hours through 34 zones, each time to the zone whose midnight comes next,
// got 10 at each midnight: 340 events. A change of zone now keeps the key's window to
// the old zone's end at least (the new zone's window that holds its last
// second): 10 in the 24 hours, and its next 10 when that window ends.
func TestCalendarZoneHopping(t *testing.T) {
	var mu sync.Mutex
	loc := time.UTC
	byZone := func(string) keylimit.Limit {
		mu.Lock()
		defer mu.Unlock()
		return keylimit.PerCalendar(10, keylimit.Daily, loc)
	}
	w, mock := calendarWindow(t, keylimit.PerCalendar(10, keylimit.Daily, nil), time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC))
	require.NoError(t, w.SetKeyLimit(byZone))
	move := func(z *time.Location) {
		mu.Lock()
		loc = z
		mu.Unlock()
		require.NoError(t, w.SetKeyLimit(byZone))
	}
	byDay, moves, end := zoneHops(t, w, mock, move, 34)
	require.Equal(t, 33, moves, "moves in 24 hours: 34 zones, one a midnight")
	require.Equal(t, map[int]int{161: 10}, byDay, "admitted in 24 hours, by UTC day (10 June is the 161st)")
	// Each move kept the window to the end of the one before, to the new
	// zone's midnight after it; the last, to UTC+12 at 11:15 UTC on the
	// 11th, to its midnight at 12:00 UTC on the 12th.
	require.Equal(t, time.Date(2026, 6, 12, 12, 0, 0, 0, time.UTC), end)
	mock.Set(end.Add(-time.Second))
	require.False(t, w.Allow("tenant"), "a second before the window's end")
	mock.Set(end)
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 24 * time.Hour, RefillAfter: 24 * time.Hour},
		w.Take("tenant", 1), "at its end")
}

// TestCalendarClockStepsBack: a clock stepped back over a boundary does
// not reopen the window the key had reached.
func TestCalendarClockStepsBack(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	at := func(m time.Month, d, h, min int) time.Time { return time.Date(2026, m, d, h, min, 0, 0, loc) }
	w, mock := calendarWindow(t, keylimit.PerCalendar(2, keylimit.Monthly, loc), at(1, 31, 23, 0))
	runCalendar(t, w, mock, "k", []calStep{
		{at(1, 31, 23, 0), 2, allowed(2, 0, time.Hour)},
		{at(2, 1, 0, 0), 2, allowed(2, 0, 28*24*time.Hour)},
		{at(1, 31, 23, 30), 1, refused(2, 0, 28*24*time.Hour, 28*24*time.Hour)},
	})
}

// TestCalendarConcurrent: on a frozen clock, a million-odd attempts of
// many goroutines on one key admit exactly Events, and the next month as
// many again.
func TestCalendarConcurrent(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	const events, goroutines, each = 1000, 32, 2000
	w, mock := calendarWindow(t, keylimit.PerCalendar(events, keylimit.Monthly, loc), time.Date(2026, 2, 28, 23, 0, 0, 0, loc))
	for _, at := range []time.Time{time.Date(2026, 2, 28, 23, 0, 0, 0, loc), time.Date(2026, 3, 1, 0, 0, 0, 0, loc)} {
		mock.Set(at)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if w.Allow("k") {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int64(events), admitted.Load(), "at %v", at)
	}
}

// TestCalendarAllocs: a calendar window's decisions allocate nothing (the
// period's bounds are computed once per period, not per decision).
func TestCalendarAllocs(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	mk := func(n int) *keylimit.FixedWindow[string] {
		w, err := keylimit.NewFixedWindow[string](keylimit.PerCalendar(n, keylimit.Daily, loc))
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		return w
	}
	testAllocs(t, mk(1<<40), mk(1))
}

// TestCalendarAll: a monthly quota beside a per-second bucket under All:
// the month's count holds across both, and All's ResetAfter is the month's
// end.
func TestCalendarAll(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	start := time.Date(2026, 1, 31, 12, 0, 0, 0, loc)
	month, mock := calendarWindow(t, keylimit.PerCalendar(5, keylimit.Monthly, loc), start)
	second, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	require.NoError(t, err)
	defer second.Close()
	both := keylimit.All[string](second, month)
	admitted := 0
	for i := range 20 {
		mock.Set(start.Add(time.Duration(i) * 500 * time.Millisecond))
		if both.Allow("k") {
			admitted++
		}
	}
	require.Equal(t, 5, admitted)
	r := both.Peek("k")
	require.False(t, r.Allowed)
	require.Equal(t, time.Date(2026, 2, 1, 0, 0, 0, 0, loc).Sub(mock.Now()), r.RetryAfter)
	mock.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, loc))
	require.True(t, both.Allow("k"))
}

// TestCalendarLimits: what a Limit per period of the calendar is valid for.
func TestCalendarLimits(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	l := keylimit.PerCalendar(10, keylimit.Monthly, loc)
	_, err := keylimit.NewTokenBucket[string](l)
	require.ErrorContains(t, err, "is a FixedWindow's limit")
	_, err = keylimit.NewSlidingCounter[string](l)
	require.ErrorContains(t, err, "use a FixedWindow")
	_, err = keylimit.NewSlidingWindow[string](l)
	require.ErrorContains(t, err, "use a FixedWindow")
	_, err = keylimit.NewFixedWindow[string](keylimit.Limit{Events: 1, Period: time.Hour, Calendar: keylimit.Daily})
	require.ErrorContains(t, err, "has no Period")
	_, err = keylimit.NewFixedWindow[string](keylimit.Limit{Events: 1, Period: time.Hour, Location: loc})
	require.ErrorContains(t, err, "has no Calendar")
	_, err = keylimit.NewFixedWindow[string](keylimit.Limit{Events: 1, Calendar: 9})
	require.ErrorContains(t, err, "none of Hourly")

	start, end := l.WindowAt(time.Date(2026, 10, 31, 23, 30, 0, 0, loc))
	require.Equal(t, time.Date(2026, 10, 1, 0, 0, 0, 0, loc).Unix(), start.Unix())
	require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, loc).Unix(), end.Unix())
	require.Equal(t, 745*time.Hour, end.Sub(start))
}

// TestParseCalendarLimit: the text form of a limit per period of the
// calendar, its round trip, and its errors.
func TestParseCalendarLimit(t *testing.T) {
	bucharest, tokyo := zone(t, "Europe/Bucharest"), zone(t, "Asia/Tokyo")
	for _, tt := range []struct {
		text, back string
		want       keylimit.Limit
	}{
		{"10000/month", "10000/month", keylimit.PerCalendar(10000, keylimit.Monthly, nil)},
		{"10000/month in UTC", "10000/month", keylimit.PerCalendar(10000, keylimit.Monthly, nil)},
		{"500/day in Europe/Bucharest", "500/day in Europe/Bucharest", keylimit.PerCalendar(500, keylimit.Daily, bucharest)},
		{" 500 / d  in  Europe/Bucharest ", "500/day in Europe/Bucharest", keylimit.PerCalendar(500, keylimit.Daily, bucharest)},
		{"50/hour in UTC", "50/hour in UTC", keylimit.PerCalendar(50, keylimit.Hourly, nil)},
		{"50/h in Asia/Tokyo", "50/hour in Asia/Tokyo", keylimit.PerCalendar(50, keylimit.Hourly, tokyo)},
		{"7/week", "7/week", keylimit.PerCalendar(7, keylimit.Weekly, nil)},
		{"7/week in Asia/Tokyo burst 3", "7/week in Asia/Tokyo burst 3", keylimit.PerCalendar(7, keylimit.Weekly, tokyo).WithBurst(3)},
		{"1/day", "1/d", keylimit.Per(1, 24*time.Hour)}, // no zone: a Period, as before
	} {
		got, err := parseLimit(tt.text)
		require.NoError(t, err, "%q", tt.text)
		// Zones are compared by name: UnmarshalText loads its own.
		require.Equal(t, tt.want.String(), got.String(), "%q", tt.text)
		require.Equal(t, tt.back, got.String(), "%q", tt.text)
		require.Equal(t, tt.want.Calendar, got.Calendar, "%q", tt.text)
		back, err := parseLimit(got.String())
		require.NoError(t, err, "%q: its String %q parses", tt.text, got.String())
		require.Equal(t, got, back, "%q: String and UnmarshalText round-trip, to the same *time.Location", tt.text)
	}
	for text, msg := range map[string]string{
		"10/day in Nowhere/Atlantis":    `keylimit: limit "10/day in Nowhere/Atlantis": zone "Nowhere/Atlantis" is not in the tz database`,
		"10/month in ../../etc/passwd":  `zone "../../etc/passwd" is not in the tz database`,
		"10/month in Europe//Bucharest": `zone "Europe//Bucharest" is not in the tz database`,
		"10/1h in UTC":                  `keylimit: limit "10/1h in UTC": a zone is for a period of the calendar: hour, day, week or month`,
		"10/fortnight in UTC":           `a zone is for a period of the calendar`,
		"0/month":                       `keylimit: events 0 is below 1 (in "0/month")`,
		"10/month burst 0":              `keylimit: burst 0 is below 1`,
	} {
		_, err := parseLimit(text)
		require.ErrorContains(t, err, msg, "%q", text)
	}

	var cfg struct {
		Plan keylimit.Limit `json:"plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"plan": "10000/month in Europe/Bucharest"}`), &cfg))
	require.Equal(t, keylimit.Monthly, cfg.Plan.Calendar)
	require.Equal(t, "Europe/Bucharest", cfg.Plan.Location.String())
	out, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.JSONEq(t, `{"plan": "10000/month in Europe/Bucharest"}`, string(out))
}

// calendarZones are zones whose rules the fuzzer crosses: none, an hour's
// DST, a half-hour's DST (Lord Howe), a two hours' DST (Troll), and a
// change of offset by a day (Apia, which skipped 30 December 2011).
var calendarZones = []string{"UTC", "Europe/Bucharest", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll", "Pacific/Apia"}

// FuzzCalendarWindow checks a calendar FixedWindow against a model made
// of Limit.WindowAt alone (a count per window start): on a clock that
// moves forward by steps from a second to a month, from 2011 on, in zones
// with unusual rules, the two agree on every Result.
func FuzzCalendarWindow(f *testing.F) {
	f.Add(uint8(1), uint8(0), uint8(3), []byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add(uint8(3), uint8(1), uint8(2), []byte{40, 41, 42, 43, 200, 201, 202, 100, 101})
	f.Add(uint8(0), uint8(4), uint8(1), []byte{60, 61, 62, 63, 64, 65, 66, 67, 68, 69})
	f.Add(uint8(1), uint8(5), uint8(2), []byte{130, 131, 132, 133, 134, 135})
	f.Add(uint8(2), uint8(3), uint8(5), []byte{255, 254, 253, 252})
	f.Fuzz(func(t *testing.T, cal, zoneIndex, events uint8, ops []byte) {
		loc := zone(t, calendarZones[int(zoneIndex)%len(calendarZones)])
		l := keylimit.PerCalendar(1+int(events%5), keylimit.Calendar(1+cal%4), loc)
		start := time.Date(2011, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(zoneIndex) * 977 * time.Minute)
		mock := newFastClock() // clock.Mock sleeps a millisecond on every move
		mock.ns.Store(start.UnixNano())
		w, err := keylimit.NewFixedWindow[string](l, keylimit.WithClock(mock))
		require.NoError(t, err)
		defer w.Close()
		counts := map[int64]int{} // by window start, Unix s
		scales := []time.Duration{time.Second, 7 * time.Minute, 61 * time.Minute, 23 * time.Hour, 9 * 24 * time.Hour}
		for i, op := range ops {
			mock.Add(time.Duration(op>>3) * scales[op&7%5])
			now := mock.Now()
			if now.Sub(start) > 70*365*24*time.Hour {
				// A limiter's time stands still 2^61 ns, about 73 years, after
				// its creation (clock.go's horizon); the model's does not.
				break
			}
			n := 1 + int(op>>5)%3
			s, e := l.WindowAt(now)
			used := counts[s.Unix()]
			want := keylimit.Result{Limit: l.Events}
			if used+n <= l.Events {
				used += n
				counts[s.Unix()] = used
				want.Allowed = true
			} else {
				want.RetryAfter = e.Sub(now)
			}
			want.Remaining = max(l.Events-used, 0)
			if used > 0 {
				want.ResetAfter = e.Sub(now)
				want.RefillAfter = e.Sub(now) // more quota at the window's end
			}
			if n > l.Events {
				continue // never: checked by the tests
			}
			require.Equal(t, want, w.Take("k", n), "op %d at %v (%v in %v): window [%v, %v)", i, now, l.Calendar, loc, s.In(loc), e.In(loc))
		}
	})
}

// TestCalendarEviction: a key is idle once its calendar window has ended,
// not before: at the key cap, a new key in the same local day finds no
// room, and one after local midnight takes the old key's place.
func TestCalendarEviction(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 10, 25, 23, 0, 0, 0, loc)) // the 25-hour day
	w, err := keylimit.NewFixedWindow[string](keylimit.PerCalendar(2, keylimit.Daily, loc), keylimit.WithClock(mock), keylimit.WithMaxKeys(1))
	require.NoError(t, err)
	defer w.Close()
	require.True(t, w.Allow("a"))
	mock.Set(time.Date(2026, 10, 25, 23, 59, 59, 0, loc))
	require.True(t, w.Take("b", 1).Untracked, "a's day has not ended")
	mock.Set(time.Date(2026, 10, 26, 0, 0, 0, 0, loc))
	r := w.Take("b", 1)
	require.True(t, r.Allowed && !r.Untracked, "a's day ended at midnight: %v", r)
	require.Equal(t, 1, w.Stats().Keys)
}

// TestCalendarSetLimit: a key moved from a Period's window to a calendar
// day keeps its count, in the day that holds now, as for any change of
// Period.
func TestCalendarSetLimit(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	w, mock := calendarWindow(t, keylimit.Per(3, 24*time.Hour), time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC))
	runCalendar(t, w, mock, "k", []calStep{{mock.Now(), 2, allowed(3, 1, 12*time.Hour)}})
	require.NoError(t, w.SetLimit(keylimit.PerCalendar(3, keylimit.Daily, loc)))
	// 15:00 in Bucharest: its day ends at 21:00 UTC.
	runCalendar(t, w, mock, "k", []calStep{
		{mock.Now(), 1, allowed(3, 0, 9*time.Hour)},
		{time.Date(2026, 3, 29, 21, 0, 0, 0, time.UTC), 3, allowed(3, 0, 24*time.Hour)},
	})
}

// TestCalendarKeysCrossABoundary: keys last seen in the month before each
// start the new month afresh, in whatever order they come back, and the
// month before still counts for a key seen again before it ends.
func TestCalendarKeysCrossABoundary(t *testing.T) {
	loc := zone(t, "Europe/Bucharest")
	jan := time.Date(2026, 1, 31, 23, 0, 0, 0, loc)
	w, mock := calendarWindow(t, keylimit.PerCalendar(2, keylimit.Monthly, loc), jan)
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, w.AllowN(k, 2), k)
	}
	mock.Set(jan.Add(59 * time.Minute))
	require.False(t, w.Allow("c"), "January still")
	mock.Set(jan.Add(time.Hour)) // 1 February, 00:00
	feb := 28 * 24 * time.Hour
	require.Equal(t, refilled(allowed(2, 1, feb), feb), w.Take("b", 1))
	require.Equal(t, refilled(allowed(2, 0, feb), feb), w.Take("a", 2))
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 2, Remaining: 2}, w.Peek("c"))
	require.Equal(t, refilled(allowed(2, 1, feb), feb), w.Take("c", 1))
}
