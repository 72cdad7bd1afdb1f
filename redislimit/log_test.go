package redislimit_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// The messages the limiters log, as the tests find them.
const (
	outageStart = "redislimit: Redis failed"
	outageEnd   = "redislimit: Redis answers again"
	ready       = "redislimit: limiter ready"
)

// TestOutageIsLoggedOnce pins issue 13.3: a Redis outage was silent (the
// failure policy answered, nothing was logged). Now its start is logged once
// at Warn, whatever the number of calls that fail, and its end once at
// Info, with how long it lasted and how many calls the policy answered.
func TestOutageIsLoggedOnce(t *testing.T) {
	t.Parallel() // its own server; most of it is waiting for the restart
	s := newServer(t)
	mock := clock.NewMock()
	rec, logger := newLogRecorder(slog.LevelInfo)
	lim, err := redislimit.NewTokenBucket(quickClient(t, s), "login", keylimit.PerMinute(5),
		redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithFailureBackoff(0),
		redislimit.WithFleetSize(1), keylimit.WithLogger(logger))
	require.NoError(t, err)
	require.True(t, lim.Allow("before"), "Allow with Redis up")

	s.Kill()
	for range 20 {
		lim.Allow("down")
	}
	mock.Add(5 * time.Second)
	lim.Allow("down")
	starts := rec.logged(outageStart)
	require.Len(t, starts, 1, "outage starts logged after 21 failed calls")
	require.Equal(t, slog.LevelWarn, starts[0].Level)
	require.Equal(t, "login", starts[0].Attrs["limiter"])
	require.Equal(t, "fail local/1", starts[0].Attrs["policy"])
	require.Equal(t, "each instance decides alone on 5/min, so a fleet of 1 admits up to 5/min (the limit is 5/min)",
		starts[0].Attrs["admits"])
	require.NotEmpty(t, starts[0].Attrs["error"], "the error of the call that started the outage (EOF, or a refused dial)")
	require.Empty(t, rec.logged(outageEnd), "outage ends logged while Redis is down")

	require.NoError(t, s.Restart())
	waitUntilBack(t, lim)
	fallbacks := lim.Stats().Fallbacks
	for range 10 {
		lim.Allow("after")
	}
	ends := rec.logged(outageEnd)
	require.Len(t, ends, 1, "outage ends logged")
	require.Equal(t, slog.LevelInfo, ends[0].Level)
	require.Equal(t, "login", ends[0].Attrs["limiter"])
	require.Equal(t, "5s", ends[0].Attrs["outage"], "the outage's length on the local clock")
	require.Equal(t, strconv.FormatUint(fallbacks, 10), ends[0].Attrs["fallbacks"], "calls the policy answered")
	require.GreaterOrEqual(t, fallbacks, uint64(21), "calls the policy answered")
	require.Len(t, rec.logged(outageStart), 1, "outage starts logged in all")
}

// TestOutageLogsAreQuiet: a Redis that fails and recovers again and again
// has one outage start logged (and its end) per quiet period of a minute;
// the next one logged says how many were not. A WRONGTYPE reply (one key
// holds another type's value) is no outage.
func TestOutageLogsAreQuiet(t *testing.T) {
	c := shared.client(t)
	f := addFaults(c)
	mock := clock.NewMock()
	rec, logger := newLogRecorder(slog.LevelInfo)
	lim, err := redislimit.NewFixedWindow(c, "quiet", keylimit.PerHour(1000), redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithFailureBackoff(0), keylimit.WithLogger(logger),
		redislimit.WithPrefix(testKey(t, "p")+":"))
	require.NoError(t, err)
	flap := func() {
		t.Helper()
		f.on.Store(true)
		_, err := lim.TakeContext(context.Background(), "k", 1)
		require.ErrorIs(t, err, errInjected)
		f.on.Store(false)
		_, err = lim.TakeContext(context.Background(), "k", 1)
		require.NoError(t, err)
	}
	counts := func() [2]int { return [2]int{len(rec.logged(outageStart)), len(rec.logged(outageEnd))} }

	flap()
	require.Equal(t, [2]int{1, 1}, counts(), "starts and ends logged after one outage")
	for range 3 {
		mock.Add(10 * time.Second)
		flap()
	}
	require.Equal(t, [2]int{1, 1}, counts(), "starts and ends logged after 3 more within a minute")
	mock.Add(time.Minute)
	flap()
	require.Equal(t, [2]int{2, 2}, counts(), "starts and ends logged a minute later")
	require.Equal(t, "3", rec.logged(outageStart)[1].Attrs["outages_not_logged"])

	require.NoError(t, c.Set(context.Background(), lim.StateKey("clobbered"), "not a hash", time.Minute).Err())
	mock.Add(time.Hour)
	_, err = lim.TakeContext(context.Background(), "clobbered", 1)
	require.ErrorContains(t, err, "WRONGTYPE")
	require.Equal(t, [2]int{2, 2}, counts(), "starts and ends logged after a WRONGTYPE reply")
}

// TestConstructionLog: each limiter says at construction what its failure
// policy admits across the fleet: at Info when nothing was chosen (the
// default divides the limit by the live fleet's size), at Warn when
// FailLocal's share and the fleet size disagree, at Debug otherwise.
func TestConstructionLog(t *testing.T) {
	client := deadClient(t)
	for _, tc := range []struct {
		name   string
		opts   []redislimit.Option
		level  slog.Level
		policy string
		admits string
	}{
		{"default", nil, slog.LevelInfo, "fail local/fleet",
			"each instance decides alone on 1/N of 10/min, N the instances announced on Redis at its last answer (1 until the first), so the fleet admits up to about 10/min"},
		{"fleet of 5", []redislimit.Option{redislimit.WithFleetSize(5)}, slog.LevelDebug, "fail local/5",
			"each instance decides alone on 2/min, so a fleet of 5 admits up to 10/min (the limit is 10/min)"},
		{"FailLocal(1), a fleet of 3", []redislimit.Option{redislimit.WithFleetSize(3),
			redislimit.WithFailurePolicy(redislimit.FailLocal(1))}, slog.LevelWarn, "fail local/1",
			"each instance decides alone on 10/min, so a fleet of 3 admits up to 30/min (the limit is 10/min)"},
		{"FailOpen", []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailOpen())}, slog.LevelDebug,
			"fail open", "every request: no limit while Redis fails"},
		{"FailClosed", []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailClosed())}, slog.LevelDebug,
			"fail closed", "nothing: every request is refused while Redis fails"},
	} {
		rec, logger := newLogRecorder(slog.LevelDebug)
		_, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10), append(tc.opts, keylimit.WithLogger(logger))...)
		require.NoError(t, err, tc.name)
		lines := rec.logged(ready)
		require.Len(t, lines, 1, "%s: lines logged at construction", tc.name)
		require.Equal(t, tc.level, lines[0].Level, tc.name)
		require.Equal(t, tc.policy, lines[0].Attrs["policy"], tc.name)
		require.Equal(t, tc.admits, lines[0].Attrs["admits"], tc.name)
		require.Equal(t, "keylimit:api:bucket:10/1m0s/10:", lines[0].Attrs["prefix"], tc.name)
		require.Equal(t, "10/min", lines[0].Attrs["limit"], tc.name)
		require.Equal(t, tc.name == "default", lines[0].Attrs["hint"] != "", "%s: a hint", tc.name)
		require.Len(t, rec.lines, 1, "%s: lines logged in all", tc.name)
	}
}

// TestConstructionLogUnderKeyLimits: the line logged at construction names
// the limiter's limit; SetKeyLimit right after the constructor logs the
// line again, saying the keys are under limits of their own, not that each
// instance decides alone on the limiter's, and SetKeyLimit(nil) once more,
// back under the limiter's limit (and a SetKeyLimit that changes nothing
// of it, nothing).
func TestConstructionLogUnderKeyLimits(t *testing.T) {
	client := deadClient(t)
	perKey := func(key string) keylimit.Limit { return keylimit.PerMinute(5 + len(key)) }
	const under = "each key's (SetKeyLimit), else 1/min"
	for _, tc := range []struct {
		name   string
		opts   []redislimit.Option
		admits string
	}{
		{"default", nil, "each instance decides alone on 1/N of each key's limit, N the instances announced on Redis at its last answer " +
			"(1 until the first), so the fleet admits up to about each key's limit"},
		{"fleet of 4", []redislimit.Option{redislimit.WithFleetSize(4)},
			"each instance decides alone on 1/4 of each key's limit, so a fleet of 4 admits up to each key's limit"},
		{"FailLocal(1), a fleet of 3", []redislimit.Option{redislimit.WithFleetSize(3), redislimit.WithFailurePolicy(redislimit.FailLocal(1))},
			"each instance decides alone on each key's limit, so a fleet of 3 admits up to 3 × each key's limit"},
		{"FailLocal(2), a fleet of 3", []redislimit.Option{redislimit.WithFleetSize(3), redislimit.WithFailurePolicy(redislimit.FailLocal(2))},
			"each instance decides alone on 1/2 of each key's limit, so a fleet of 3 admits up to 3/2 of each key's limit"},
	} {
		rec, logger := newLogRecorder(slog.LevelDebug)
		lim, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(1), append(tc.opts, keylimit.WithLogger(logger))...)
		require.NoError(t, err, tc.name)
		lines := rec.logged(ready)
		require.Len(t, lines, 1, "%s: lines logged at construction", tc.name)
		require.Equal(t, "1/min", lines[0].Attrs["limit"], tc.name)
		require.NoError(t, lim.SetKeyLimit(perKey), tc.name)
		require.NoError(t, lim.SetKeyLimit(perKey), tc.name)
		lines = rec.logged("redislimit: key limits set; while Redis fails, its failure policy decides")
		require.Len(t, lines, 1, "%s: lines logged by SetKeyLimit, twice", tc.name)
		require.Equal(t, under, lines[0].Attrs["limit"], tc.name)
		require.Equal(t, tc.admits, lines[0].Attrs["admits"], tc.name)
		require.NoError(t, lim.SetKeyLimit(nil), tc.name)
		lines = rec.logged("redislimit: key limits set; while Redis fails, its failure policy decides")
		require.Len(t, lines, 2, "%s: lines logged by SetKeyLimit(nil)", tc.name)
		require.Equal(t, "1/min", lines[1].Attrs["limit"], tc.name)
	}
}

// TestDefaultLogger: without WithLogger, lines go to slog.Default() as it
// is when they are logged, not when the limiter was made.
func TestDefaultLogger(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	lim, err := redislimit.NewTokenBucket(deadClient(t), "api", keylimit.PerMinute(10))
	require.NoError(t, err)
	rec, logger := newLogRecorder(slog.LevelInfo)
	slog.SetDefault(logger)
	lim.Allow("k")
	require.Len(t, rec.logged(outageStart), 1, "outage starts logged to the default logger set after construction")
}

// TestWithFleetSize: the fleet size sets the default failure policy to
// FailLocal of it; a policy given explicitly still wins.
func TestWithFleetSize(t *testing.T) {
	client := deadClient(t)
	for _, tc := range []struct {
		opts []redislimit.Option
		want int
	}{
		{[]redislimit.Option{redislimit.WithFleetSize(2)}, 5},
		{[]redislimit.Option{redislimit.WithFleetSize(2), redislimit.WithFailurePolicy(redislimit.FailOpen())}, 10},
		{[]redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailLocal(5)), redislimit.WithFleetSize(2)}, 2},
	} {
		lim, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10),
			append(tc.opts, keylimit.WithClock(clock.NewMock()))...)
		require.NoError(t, err)
		admitted := 0
		for range 10 {
			if lim.Allow("k") {
				admitted++
			}
		}
		require.Equal(t, tc.want, admitted, "admitted of 10 with Redis down, %d options", len(tc.opts))
	}
	for _, tc := range []struct {
		opt  redislimit.Option
		want string
	}{
		{redislimit.WithFleetSize(0), "redislimit: WithFleetSize(0): the fleet size is below 1"},
		{keylimit.WithLogger(nil), "keylimit: WithLogger(nil)"},
	} {
		_, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10), tc.opt)
		require.ErrorContains(t, err, tc.want)
	}
}
