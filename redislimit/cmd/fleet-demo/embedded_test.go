package main

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestEmbeddedCalendarAsServer (issue 37.5): calendar quotas in
// America/New_York decide alike on the embedded Redis, on redis-server and
// in memory, across a day's end, both DST changes, a month's end and the
// year's end: the same Results, exactly, step by step. The Redis limiters
// compute their windows on the system's clock, which is in none of the
// steps' windows, so every call there is stale at first and made again at
// Redis's time: the path on which miniredis failed to compile the stale
// error (a Lua error raised with a table) and the failure policy decided.
// miniredis's time is stepped with SetTime (its TIME); redis-server's
// cannot be, so its calls carry the step's time, as the package's own tests
// do (WithScriptClock).
func TestEmbeddedCalendarAsServer(t *testing.T) {
	require.True(t, redisserver.Installed(), "the test needs redis-server, and "+redisserver.InstallHint)
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err, "the test needs the tz database")
	srv, err := redisserver.Start(0)
	require.NoError(t, err)
	defer srv.Stop()
	mr := miniredis.RunT(t)

	// The step's time, for redis-server's calls: atomic, since a limiter's
	// fleet announcements go out on goroutines of their own.
	var now atomic.Pointer[time.Time]
	server := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	server.AddHook(stepClock{func() time.Time { return loadTime(&now) }})
	embedded := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer server.Close()
	defer embedded.Close()

	at := func(y int, m time.Month, d, h, min, s int) time.Time { return time.Date(y, m, d, h, min, s, 0, ny) }
	utc := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, time.UTC) }
	steps := []time.Time{
		at(2026, 3, 7, 12, 0, 0), at(2026, 3, 7, 23, 59, 59), // a day's end
		at(2026, 3, 8, 0, 0, 0), at(2026, 3, 8, 1, 59, 59), utc(2026, 3, 8, 7, 0), // 02:00 EST is 03:00 EDT
		at(2026, 3, 8, 23, 0, 0), at(2026, 3, 9, 0, 0, 0),
		utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30), // 01:30 EDT, then 01:30 EST
		at(2026, 11, 1, 23, 59, 59), at(2026, 11, 2, 0, 0, 0),
		at(2026, 11, 30, 23, 59, 59), at(2026, 12, 1, 0, 0, 0), // a month's end
		utc(2026, 12, 31, 5, 0), utc(2026, 12, 31, 5, 1), // the issue's: Dec 31 begins in New York
		at(2026, 12, 31, 23, 59, 59), at(2027, 1, 1, 0, 0, 0), at(2027, 1, 1, 0, 0, 1), // the year's end
	}
	for _, tt := range []struct {
		name   string
		limits []string // joined with keylimit.All when several; "10/s" is a TokenBucket
		takes  []int    // at each step, in turn; 0 is a Peek
	}{
		{"month-and-second", []string{"10/s", "1000/month in America/New_York"}, []int{1, 9, 1, 0}},
		{"small-month-and-second", []string{"10/s", "4/month in America/New_York"}, []int{1, 2, 1, 0}},
		{"day", []string{"3/day in America/New_York"}, []int{1, 2, 1, 0}},
		{"hour", []string{"2/hour in America/New_York"}, []int{1, 1, 1, 0}},
		{"week", []string{"5/week in America/New_York"}, []int{2, 2, 2, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mock := clock.NewMock()
			var mu sync.Mutex
			var failed []error
			onError := redislimit.WithOnError(func(err error) {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			})
			build := func(c redis.UniversalClient) keylimit.Limiter[string] {
				var parts []keylimit.Limiter[string]
				for i, text := range tt.limits {
					var l keylimit.Limit
					err := l.UnmarshalText([]byte(text))
					require.NoError(t, err)
					name := tt.name + "-" + string(rune('a'+i))
					var lim keylimit.Limiter[string]
					if l.Calendar == 0 {
						lim, err = redislimit.NewTokenBucket(c, name, l, onError, redislimit.WithTimeout(5*time.Second), keylimit.WithClock(mock))
					} else {
						lim, err = redislimit.NewFixedWindow(c, name, l, onError, redislimit.WithTimeout(5*time.Second), keylimit.WithClock(mock))
					}
					require.NoError(t, err)
					parts = append(parts, lim)
				}
				return joined(parts)
			}
			var memParts []keylimit.Limiter[string]
			for _, text := range tt.limits {
				var l keylimit.Limit
				err := l.UnmarshalText([]byte(text))
				require.NoError(t, err)
				var lim keylimit.Limiter[string]
				if l.Calendar == 0 {
					lim, err = keylimit.NewTokenBucket[string](l, keylimit.WithClock(mock))
				} else {
					lim, err = keylimit.NewFixedWindow[string](l, keylimit.WithClock(mock))
				}
				require.NoError(t, err)
				memParts = append(memParts, lim)
			}
			onServer, onEmbedded, inMemory := build(server), build(embedded), joined(memParts)
			for i, step := range steps {
				now.Store(&step)
				mr.SetTime(step)
				mock.Set(step)
				for j, n := range tt.takes {
					var s, e, m keylimit.Result
					if n == 0 {
						s, e, m = onServer.Peek("tenant"), onEmbedded.Peek("tenant"), inMemory.Peek("tenant")
					} else {
						s, e, m = onServer.Take("tenant", n), onEmbedded.Take("tenant", n), inMemory.Take("tenant", n)
					}
					require.Equal(t, m, s, "step %d (%v), call %d (n=%d): redis-server, then memory", i, step, j, n)
					require.Equal(t, m, e, "step %d (%v), call %d (n=%d): miniredis, then memory", i, step, j, n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, failed, "no call failed")
		})
	}
}

// TestEmbeddedZoneChangeAsServer (issue 37.4 on both Redis): a key moved
// to the zone whose midnight comes next keeps its window to the old zone's
// end at least, alike on miniredis, on redis-server and in memory.
func TestEmbeddedZoneChangeAsServer(t *testing.T) {
	require.True(t, redisserver.Installed(), "the test needs redis-server, and "+redisserver.InstallHint)
	moscow, err := time.LoadLocation("Europe/Moscow") // UTC+3: its midnight is at 21:00 UTC
	require.NoError(t, err, "the test needs the tz database")
	srv, err := redisserver.Start(0)
	require.NoError(t, err)
	defer srv.Stop()
	mr := miniredis.RunT(t)
	var now atomic.Pointer[time.Time] // read by announcements' goroutines too
	server := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	server.AddHook(stepClock{func() time.Time { return loadTime(&now) }})
	embedded := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer server.Close()
	defer embedded.Close()

	mock := clock.NewMock()
	var mu sync.Mutex
	loc := time.UTC
	byZone := func(string) keylimit.Limit {
		mu.Lock()
		defer mu.Unlock()
		return keylimit.PerCalendar(3, keylimit.Daily, loc)
	}
	type keyLimiter interface {
		keylimit.Limiter[string]
		SetKeyLimit(func(string) keylimit.Limit) error
	}
	own := keylimit.PerCalendar(3, keylimit.Daily, nil)
	var lims []keyLimiter
	for _, c := range []*redis.Client{server, embedded} {
		lim, err := redislimit.NewFixedWindow(c, "zones", own, redislimit.WithTimeout(5*time.Second), keylimit.WithClock(mock),
			redislimit.WithFailurePolicy(redislimit.FailClosed()))
		require.NoError(t, err)
		lims = append(lims, lim)
	}
	mlim, err := keylimit.NewFixedWindow[string](own, keylimit.WithClock(mock))
	require.NoError(t, err)
	defer mlim.Close()
	lims = append(lims, mlim)
	utc := func(d, h, m, s int) time.Time { return time.Date(2026, 6, d, h, m, s, 0, time.UTC) }
	for i, step := range []struct {
		at   time.Time
		move bool
		n    int
	}{
		{utc(10, 20, 0, 0), false, 3}, {utc(10, 20, 30, 0), true, 1}, {utc(10, 21, 0, 0), false, 1},
		{utc(10, 23, 59, 59), false, 1}, {utc(11, 0, 0, 0), false, 1}, {utc(11, 20, 59, 59), false, 1},
		{utc(11, 21, 0, 0), false, 2}, {utc(11, 21, 0, 0), false, 2}, {utc(11, 21, 0, 0), false, 0},
	} {
		at := step.at
		now.Store(&at)
		mr.SetTime(step.at)
		mock.Set(step.at)
		if step.move {
			mu.Lock()
			loc = moscow
			mu.Unlock()
			for _, l := range lims {
				require.NoError(t, l.SetKeyLimit(byZone))
			}
		}
		var got [3]keylimit.Result
		for j, l := range lims {
			if step.n == 0 {
				got[j] = l.Peek("tenant")
			} else {
				got[j] = l.Take("tenant", step.n)
			}
		}
		require.Equal(t, got[2], got[0], "step %d at %v: redis-server, then memory", i, step.at)
		require.Equal(t, got[2], got[1], "step %d at %v: miniredis, then memory", i, step.at)
		if i > 0 && i < 6 {
			require.False(t, got[2].Allowed, "step %d at %v: the day's 3 are spent until 21:00 UTC on the 11th", i, step.at)
		}
		if i == 6 {
			require.Equal(t, keylimit.Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 24 * time.Hour, RefillAfter: 24 * time.Hour},
				got[2], "Moscow's day from 21:00 UTC")
		}
	}
}

// joined is the limiter of parts: the one, or keylimit.All of them.
func joined(parts []keylimit.Limiter[string]) keylimit.Limiter[string] {
	if len(parts) == 1 {
		return parts[0]
	}
	return keylimit.All(parts...)
}

// stepClock is a client hook that passes now's time with each script call,
// after the script's other arguments: the scripts then decide on it
// instead of Redis's TIME (lua/prelude.lua), as under the package tests'
// WithScriptClock.
type stepClock struct{ now func() time.Time }

func (stepClock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h stepClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		t := h.now()
		args := append(append([]any(nil), cmd.Args()...), t.Unix(), t.Nanosecond())
		timed := redis.NewCmd(ctx, args...)
		err := next(ctx, timed)
		c := cmd.(*redis.Cmd)
		c.SetVal(timed.Val())
		c.SetErr(timed.Err())
		return err
	}
}

func (stepClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
				panic("stepClock: a script call in a pipeline (the test makes one call at a time)")
			}
		}
		return next(ctx, cmds)
	}
}

// loadTime returns the time p holds, or the zero time before any.
func loadTime(p *atomic.Pointer[time.Time]) time.Time {
	if t := p.Load(); t != nil {
		return *t
	}
	return time.Time{}
}
