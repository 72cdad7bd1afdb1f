package redislimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// calendarStep is a request at an instant: a take of n, a peek if n is 0.
type calendarStep struct {
	at time.Time
	n  int
}

// calendarSideBySide plays steps on a Redis calendar window and on
// keylimit's in-memory one of the same limit, both on mock, and requires
// the same Results, exactly: the boundaries are whole seconds, Redis's
// times whole µs. It returns the Redis limiter's Results.
func calendarSideBySide(t *testing.T, rlim, mlim keylimit.Limiter[string], mock *clock.Mock, key string, steps []calendarStep) []keylimit.Result {
	t.Helper()
	var out []keylimit.Result
	for i, st := range steps {
		mock.Set(st.at)
		var got, want keylimit.Result
		if st.n == 0 {
			got, want = rlim.Peek(key), mlim.Peek(key)
		} else {
			got, want = rlim.Take(key, st.n), mlim.Take(key, st.n)
		}
		require.Equal(t, want, got, "step %d at %v, n=%d: Redis, then memory", i, st.at, st.n)
		out = append(out, got)
	}
	return out
}

func bucharest(t testing.TB) *time.Location {
	loc, err := time.LoadLocation("Europe/Bucharest")
	require.NoError(t, err, "the tests need the tz database")
	return loc
}

// TestCalendarWindow: a Redis FixedWindow of a limit per period of the
// calendar decides as keylimit's does, on the script's clock, across
// month ends (a leap February too), Bucharest's 23 h and 25 h days, and the
// skipped and the repeated hour; ResetAfter runs to the real boundary.
func TestCalendarWindow(t *testing.T) {
	loc := bucharest(t)
	at := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, loc) }
	utc := func(m time.Month, d, h, min int) time.Time { return time.Date(2026, m, d, h, min, 0, 0, time.UTC) }
	for _, tt := range []struct {
		name  string
		limit keylimit.Limit
		steps []calendarStep
	}{
		{"month", keylimit.PerCalendar(3, keylimit.Monthly, loc), []calendarStep{
			{at(2025, 1, 31, 23, 59), 2}, {at(2025, 1, 31, 23, 59), 2}, {at(2025, 2, 1, 0, 0), 3}, {at(2025, 2, 28, 23, 0), 1},
			{at(2025, 3, 1, 0, 0), 0}, {at(2025, 3, 1, 0, 0), 1},
		}},
		{"leap-february", keylimit.PerCalendar(3, keylimit.Monthly, loc), []calendarStep{
			{at(2024, 2, 28, 23, 0), 3}, {at(2024, 2, 29, 12, 0), 1}, {at(2024, 3, 1, 0, 0), 1},
		}},
		{"day", keylimit.PerCalendar(2, keylimit.Daily, loc), []calendarStep{
			{at(2026, 3, 29, 0, 0), 1}, {at(2026, 3, 29, 23, 0), 1}, {at(2026, 3, 29, 23, 59), 1}, {at(2026, 3, 30, 0, 0), 1},
			{at(2026, 10, 25, 0, 0), 2}, {utc(10, 25, 1, 30), 1}, {at(2026, 10, 26, 0, 0), 2},
		}},
		{"hour", keylimit.PerCalendar(2, keylimit.Hourly, loc), []calendarStep{
			{utc(3, 29, 0, 30), 2}, {utc(3, 29, 0, 59), 1}, {utc(3, 29, 1, 0), 2},
			{utc(10, 25, 0, 0), 1}, {utc(10, 25, 0, 59), 1}, {utc(10, 25, 1, 30), 1}, {utc(10, 25, 2, 0), 2},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mock := clock.NewMock()
			mock.Set(tt.steps[0].at)
			rlim, err := redislimit.NewFixedWindow(shared.client(t), "test", tt.limit, redislimit.WithTimeout(patient),
				keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
			require.NoError(t, err)
			mlim, err := keylimit.NewFixedWindow[string](tt.limit, keylimit.WithClock(mock))
			require.NoError(t, err)
			defer mlim.Close()
			calendarSideBySide(t, rlim, mlim, mock, testKey(t, "k"), tt.steps)
		})
	}
	// The first month's steps by value, so that both cannot be wrong alike.
	mock := clock.NewMock()
	mock.Set(at(2025, 1, 31, 23, 59))
	rlim, err := redislimit.NewFixedWindow(shared.client(t), "test", keylimit.PerCalendar(3, keylimit.Monthly, loc),
		redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
	require.NoError(t, err)
	key := testKey(t, "values")
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: time.Minute, RefillAfter: time.Minute}, rlim.Take(key, 2))
	require.Equal(t, keylimit.Result{Limit: 3, Remaining: 1, RetryAfter: time.Minute, ResetAfter: time.Minute, RefillAfter: time.Minute}, rlim.Take(key, 2))
	mock.Set(at(2025, 2, 1, 0, 0))
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 28 * 24 * time.Hour, RefillAfter: 28 * 24 * time.Hour}, rlim.Take(key, 3))
}

// TestCalendarZoneChangeOnRedis: a key whose zone its SetKeyLimit function
// changes keeps its count, which then counts in the new zone's window, as
// in memory; a refund of an admission in the window gives it back.
func TestCalendarZoneChangeOnRedis(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	utc := func(d, h int) time.Time { return time.Date(2026, 6, d, h, 0, 0, 0, time.UTC) }
	var mu sync.Mutex
	zones := map[string]*time.Location{}
	byZone := func(key string) keylimit.Limit {
		mu.Lock()
		defer mu.Unlock()
		return keylimit.PerCalendar(3, keylimit.Daily, zones[key])
	}
	mock := clock.NewMock()
	mock.Set(utc(10, 20))
	own := keylimit.PerCalendar(3, keylimit.Daily, nil)
	rlim, err := redislimit.NewFixedWindow(shared.client(t), "test", own, redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
	require.NoError(t, err)
	mlim, err := keylimit.NewFixedWindow[string](own, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer mlim.Close()
	key := testKey(t, "acme")
	for _, l := range []interface {
		SetKeyLimit(func(string) keylimit.Limit) error
	}{rlim, mlim} {
		require.NoError(t, l.SetKeyLimit(byZone))
	}
	calendarSideBySide(t, rlim, mlim, mock, key, []calendarStep{{utc(10, 20), 2}})
	mu.Lock()
	zones[key] = tokyo
	mu.Unlock()
	for _, l := range []interface {
		SetKeyLimit(func(string) keylimit.Limit) error
	}{rlim, mlim} {
		require.NoError(t, l.SetKeyLimit(byZone))
	}
	got := calendarSideBySide(t, rlim, mlim, mock, key, []calendarStep{{utc(10, 20), 1}, {utc(11, 0), 1}, {utc(11, 15), 2}})
	require.Equal(t, 19*time.Hour, got[0].ResetAfter, "Tokyo's day ends at 15:00 UTC")
	require.False(t, got[1].Allowed, "the count came along")
	r, a := rlim.Admit(key, 1)
	require.True(t, r.Allowed)
	require.Equal(t, 0, r.Remaining)
	rlim.Refund(key, a)
	require.Equal(t, 1, rlim.Peek(key).Remaining, "the refund gave the admission back")
}

// TestCalendarZoneHoppingOnRedis (issue 37.4): the tenant of keylimit's
// TestCalendarZoneHopping, 10 a day, moved through 34 zones in 24 hours,
// each time to the zone whose midnight comes next, spending all it can
// after each move and at each midnight: on Redis as in memory, Result by
// Result, 10 in the 24 hours (330 before: 10 at each midnight), and its
// next 10 when the last window ends, at the last zone's midnight after the
// end of the window before.
func TestCalendarZoneHoppingOnRedis(t *testing.T) {
	var zones []*time.Location
	for _, name := range []string{"UTC", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Kabul", "Asia/Yangon", "Australia/Darwin",
		"Australia/Eucla", "Pacific/Marquesas", "America/St_Johns", "Pacific/Chatham"} {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err, "the tests need the tz database")
		zones = append(zones, loc)
	}
	for h := 1; h <= 14; h++ {
		zones = append(zones, time.FixedZone(fmt.Sprintf("UTC+%d", h), h*3600))
		if h <= 12 {
			zones = append(zones, time.FixedZone(fmt.Sprintf("UTC-%d", h), -h*3600))
		}
	}
	nextMidnight := func(loc *time.Location, now time.Time) time.Time {
		y, m, d := now.In(loc).Date()
		return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	var mu sync.Mutex
	cur := time.UTC
	byZone := func(string) keylimit.Limit {
		mu.Lock()
		defer mu.Unlock()
		return keylimit.PerCalendar(10, keylimit.Daily, cur)
	}
	start := time.Date(2026, 6, 10, 12, 0, 0, 0, time.UTC)
	mock := clock.NewMock()
	mock.Set(start)
	own := keylimit.PerCalendar(10, keylimit.Daily, nil)
	rlim, err := redislimit.NewFixedWindow(shared.client(t), "test", own, redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
	require.NoError(t, err)
	mlim, err := keylimit.NewFixedWindow[string](own, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer mlim.Close()
	lims := []interface {
		SetKeyLimit(func(string) keylimit.Limit) error
	}{rlim, mlim}
	for _, l := range lims {
		require.NoError(t, l.SetKeyLimit(byZone))
	}
	key := testKey(t, "tenant")
	admitted := 0
	spend := func() {
		t.Helper()
		for range 1000 {
			got, want := rlim.Take(key, 1), mlim.Take(key, 1)
			require.Equal(t, want, got, "at %v in %v: Redis, then memory", mock.Now(), cur)
			if !got.Allowed {
				return
			}
			admitted++
		}
	}
	spend()
	moves := 0
	for {
		now := mock.Now()
		next := zones[1]
		for _, z := range zones {
			if z != cur && (next == cur || nextMidnight(z, now).Before(nextMidnight(next, now))) {
				next = z
			}
		}
		mu.Lock()
		cur = next
		mu.Unlock()
		for _, l := range lims {
			require.NoError(t, l.SetKeyLimit(byZone))
		}
		moves++
		spend()
		at := nextMidnight(next, now)
		if !at.Before(start.Add(24 * time.Hour)) {
			break
		}
		mock.Set(at)
		spend()
	}
	require.Equal(t, 33, moves, "moves in 24 hours: 34 zones, one a midnight")
	require.Equal(t, 10, admitted, "admitted in 24 hours")
	r := rlim.Peek(key)
	require.Equal(t, mlim.Peek(key), r)
	end := mock.Now().Add(r.ResetAfter)
	require.True(t, end.Equal(time.Date(2026, 6, 12, 12, 0, 0, 0, time.UTC)), "the last window's end: %v", end)
	mock.Set(end)
	spend()
	require.Equal(t, 20, admitted, "and 10 more at its end")
}

// TestCalendarAllOnRedis: a monthly quota and a per-second bucket on
// Redis, under All (one joined script call): exactly the month's quota
// passes, and the next month's begins at local midnight on the 1st.
func TestCalendarAllOnRedis(t *testing.T) {
	loc := bucharest(t)
	start := time.Date(2026, 1, 31, 12, 0, 0, 0, loc)
	mock := clock.NewMock()
	mock.Set(start)
	opts := []redislimit.Option{redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock)}
	c := shared.client(t)
	month, err := redislimit.NewFixedWindow(c, "month", keylimit.PerCalendar(5, keylimit.Monthly, loc), opts...)
	require.NoError(t, err)
	second, err := redislimit.NewTokenBucket(c, "second", keylimit.PerSecond(2), opts...)
	require.NoError(t, err)
	both := keylimit.All[string](second, month)
	key := testKey(t, "k")
	admitted := 0
	for i := range 20 {
		mock.Set(start.Add(time.Duration(i) * 500 * time.Millisecond))
		if both.Allow(key) {
			admitted++
		}
	}
	require.Equal(t, 5, admitted)
	r := both.Peek(key)
	require.False(t, r.Allowed)
	require.Equal(t, time.Date(2026, 2, 1, 0, 0, 0, 0, loc).Sub(mock.Now()), r.RetryAfter)
	mock.Set(time.Date(2026, 2, 1, 0, 0, 0, 0, loc))
	require.True(t, both.Allow(key))
}

// TestCalendarStaleWindow: a caller whose clock is in another window than
// Redis's (here two hours ahead, an hourly window) passes a window that
// does not hold Redis's time; the script names its time instead of
// deciding, and the call is made again with the window at that time: the
// decision is Redis's, as with clocks that agree, in two script calls.
func TestCalendarStaleWindow(t *testing.T) {
	loc := bucharest(t)
	s := newServer(t)
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)) // 03:30 EEST: the repeated hour
	ahead := skewedMock{mock, 2 * time.Hour}
	l := keylimit.PerCalendar(2, keylimit.Hourly, loc)
	rlim, err := redislimit.NewFixedWindow(s.client(t), "test", l, redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithScriptClocks(mock, ahead))
	require.NoError(t, err)
	rlim.Peek("warm") // loads the script: the call below is one EVALSHA and its repeat
	before := s.commandStats(t)
	r := rlim.Take("k", 2)
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 90 * time.Minute, RefillAfter: 90 * time.Minute}, r,
		"the window of Redis's time, 03:00 EEST to 04:00 EET")
	sent := s.sentSince(t, before)
	require.Equal(t, int64(2), sent["evalsha"]+sent["eval"], "the call and its repeat: %v", sent)
}

// skewedMock is a mock's time moved by offset.
type skewedMock struct {
	*clock.Mock
	offset time.Duration
}

func (c skewedMock) Now() time.Time { return c.Mock.Now().Add(c.offset) }

// TestCalendarOnRedisTime: on Redis's own clock, a daily window in a zone
// ends where keylimit.Limit.WindowAt says.
func TestCalendarOnRedisTime(t *testing.T) {
	t.Parallel()
	loc := bucharest(t)
	l := keylimit.PerCalendar(5, keylimit.Daily, loc)
	rlim, err := redislimit.NewFixedWindow(shared.client(t), "test", l, redislimit.WithTimeout(patient))
	require.NoError(t, err)
	var r keylimit.Result
	at := timed(func() { r = rlim.Take(testKey(t, "k"), 1) })
	require.True(t, r.Allowed)
	_, end := l.WindowAt(at.start)
	lo, hi := end.Sub(at.end)-time.Millisecond, end.Sub(at.start)+time.Millisecond
	require.True(t, lo <= r.ResetAfter && r.ResetAfter <= hi, "ResetAfter %v, want within [%v, %v]", r.ResetAfter, lo, hi)
}

// TestCalendarQuotaTierOnRedis: a quota tier of a Redis bucket and a Redis
// monthly window: the fields' t runs to the month's end in its zone, w is
// the month's length, and Retry-After of a refusal the time to the 1st.
func TestCalendarQuotaTierOnRedis(t *testing.T) {
	loc := bucharest(t)
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 2, 28, 23, 0, 0, 0, loc))
	opts := []redislimit.Option{redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock)}
	c := shared.client(t)
	month, err := redislimit.NewFixedWindow(c, testKey(t, "month"), keylimit.PerCalendar(2, keylimit.Monthly, loc), opts...)
	require.NoError(t, err)
	second, err := redislimit.NewTokenBucket(c, testKey(t, "second"), keylimit.PerSecond(10), opts...)
	require.NoError(t, err)
	d, err := kquota.New(kquota.Config{Policies: []kquota.Policy{{Name: "second", Limiter: second}, {Name: "month", Limiter: month}}})
	require.NoError(t, err)
	key := testKey(t, "k")
	const feb, mar = `"second";q=10;w=1, "month";q=2;w=2419200`, `"second";q=10;w=1, "month";q=2;w=2674800`
	for i, step := range []struct {
		at                       time.Time
		allowed                  bool
		rateLimit, policy, retry string
	}{
		{time.Date(2026, 2, 28, 23, 0, 0, 0, loc), true, `"second";r=9;t=1, "month";r=1;t=3600`, feb, ""},
		{time.Date(2026, 2, 28, 23, 30, 0, 0, loc), true, `"second";r=9;t=1, "month";r=0;t=1800`, feb, ""},
		{time.Date(2026, 2, 28, 23, 59, 0, 0, loc), false, `"second";r=10;t=0, "month";r=0;t=60`, feb, "60"},
		{time.Date(2026, 3, 1, 0, 0, 0, 0, loc), true, `"second";r=9;t=1, "month";r=1;t=2674800`, mar, ""},
	} {
		mock.Set(step.at)
		v, err := d.Decide(context.Background(), key, "", 1)
		require.NoError(t, err)
		require.Equal(t, step.allowed, v.Action() == kquota.Proceed, "step %d", i)
		require.Equal(t, step.rateLimit, v.RateLimit(), "step %d", i)
		require.Equal(t, step.policy, v.RateLimitPolicy(), "step %d", i)
		require.Equal(t, step.retry, v.RetryAfter(), "step %d", i)
	}
}

// TestCalendarKeyUnderLeases: a FixedWindow with leases whose key a
// SetKeyLimit function gives a calendar day decides that key on Redis at
// each call (no lease), exactly.
func TestCalendarKeyUnderLeases(t *testing.T) {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC))
	lim, err := redislimit.NewFixedWindow(shared.client(t), "test", keylimit.PerHour(100), redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithScriptClock(mock), redislimit.WithLeases(time.Minute))
	require.NoError(t, err)
	defer lim.Close()
	daily := testKey(t, "daily")
	require.NoError(t, lim.SetKeyLimit(func(key string) keylimit.Limit {
		if key == daily {
			return keylimit.PerCalendar(3, keylimit.Daily, bucharest(t))
		}
		return keylimit.Limit{}
	}))
	admitted := 0
	for range 5 {
		if r := lim.Take(daily, 1); r.Allowed {
			admitted++
			require.NoError(t, r.Err)
		}
	}
	require.Equal(t, 3, admitted)
	require.Equal(t, 0, redislimit.LeaseHeld(lim, daily))
	require.Equal(t, 9*time.Hour, lim.Peek(daily).RetryAfter, "Bucharest's day ends at 21:00 UTC")
	require.True(t, lim.Allow(testKey(t, "hourly")))
	_, err = redislimit.NewFixedWindow(shared.client(t), "test", keylimit.PerCalendar(3, keylimit.Daily, nil), redislimit.WithLeases(time.Minute))
	require.ErrorContains(t, err, "WithLeases does not apply to a calendar window")
}
