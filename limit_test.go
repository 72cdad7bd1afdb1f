package keylimit_test

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit keylimit.Limit
		err   string // substring of the error; "" means valid
	}{
		{"per second", keylimit.PerSecond(10), ""},
		{"per minute with burst", keylimit.PerMinute(10).WithBurst(3), ""},
		{"per hour", keylimit.PerHour(500), ""},
		{"one per nanosecond", keylimit.Per(1, time.Nanosecond), ""},
		{"zero value", keylimit.Limit{}, "keylimit: events 0 is below 1"},
		{"negative events", keylimit.Per(-1, time.Second), "keylimit: events -1 is below 1"},
		{"zero period", keylimit.Per(1, 0), "keylimit: period 0s is not positive"},
		{"negative period", keylimit.Per(1, -time.Second), "keylimit: period -1s is not positive"},
		{"WithBurst(0)", keylimit.PerSecond(1).WithBurst(0), "keylimit: burst 0 is below 1"},
		{"negative burst", keylimit.PerSecond(1).WithBurst(-3), "keylimit: burst -3 is below 1"},
		{"negative burst field", keylimit.Limit{Events: 1, Period: time.Second, Burst: -1}, "keylimit: burst -1 is below 1"},
		{"interval rounds to 0", keylimit.Per(10, 5*time.Nanosecond), "keylimit: 10 events per 5ns is more than one per nanosecond"},
		{"burst span overflows", keylimit.PerHour(1).WithBurst(1 << 40), "spans more than"},
		{"period too long", keylimit.Per(1, 1<<62), "is longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Validate()
			if tt.err == "" {
				require.NoError(t, err)
				_, err = keylimit.NewTokenBucket[string](tt.limit)
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.err)
			lim, err := keylimit.NewTokenBucket[string](tt.limit)
			require.ErrorContains(t, err, tt.err, "the constructor reports the same error")
			require.Nil(t, lim)
		})
	}
}

func TestLimitInterval(t *testing.T) {
	tests := []struct {
		limit keylimit.Limit
		want  time.Duration
	}{
		{keylimit.PerSecond(10), 100 * time.Millisecond},
		{keylimit.PerMinute(1), time.Minute},
		{keylimit.PerHour(500), 7200 * time.Millisecond},
		// Rounded up, so that the bucket never refills faster than asked.
		{keylimit.PerSecond(3), 333333334 * time.Nanosecond},
		{keylimit.Limit{}, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.limit.WithBurst(1).FillTime(), "%v", tt.limit)
	}
}

func TestLimitFillTime(t *testing.T) {
	tests := []struct {
		limit keylimit.Limit
		want  time.Duration
	}{
		{keylimit.PerSecond(1).WithBurst(5), 5 * time.Second},
		{keylimit.PerMinute(10), time.Minute},
		// Exact: 3 × 333,333,334 ns would be 1.000000002 s.
		{keylimit.PerSecond(3), time.Second},
		{keylimit.Per(3, 10*time.Nanosecond).WithBurst(2), 7 * time.Nanosecond}, // 6.67 ns, rounded up
		{keylimit.Per(1, time.Duration(1<<62)).WithBurst(4), time.Duration(1<<63 - 1)},
		{keylimit.Limit{}, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.limit.FillTime(), "%v", tt.limit)
	}
	b, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(2).WithBurst(6))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.SetKeyLimit(func(k string) keylimit.Limit {
		if k == "gold" {
			return keylimit.PerSecond(10).WithBurst(20)
		}
		return keylimit.Limit{}
	}))
	require.Equal(t, 3*time.Second, b.LimitOf("free").FillTime())
	require.Equal(t, 2*time.Second, b.LimitOf("gold").FillTime())
	require.Zero(t, b.Stats().Keys, "LimitOf creates no key")
}

func TestLimitBurstAndString(t *testing.T) {
	require.Equal(t, 10, keylimit.PerSecond(10).BurstSize(), "Burst 0 means Events")
	require.Equal(t, 3, keylimit.PerSecond(10).WithBurst(3).BurstSize())
	require.Equal(t, "10/s", keylimit.PerSecond(10).String())
	require.Equal(t, "1/s burst 5", keylimit.PerSecond(1).WithBurst(5).String())
	require.Equal(t, keylimit.Limit{Events: 7, Period: time.Minute}, keylimit.PerMinute(7))
}

// TestParseLimit: the text form of a Limit, as configuration gives it, and
// the errors that say what is wrong.
func TestParseLimit(t *testing.T) {
	for _, tt := range []struct {
		text string
		want keylimit.Limit
	}{
		{"100/min", keylimit.PerMinute(100)},
		{"100/minute", keylimit.PerMinute(100)},
		{"100/m", keylimit.PerMinute(100)},
		{"10/s burst 20", keylimit.PerSecond(10).WithBurst(20)},
		{" 10 / sec  burst 20 ", keylimit.PerSecond(10).WithBurst(20)},
		{"5000/h", keylimit.PerHour(5000)},
		{"7/1m30s", keylimit.Per(7, 90*time.Second)},
		{"1/d", keylimit.Per(1, 24*time.Hour)},
		{"3/250ms", keylimit.Per(3, 250*time.Millisecond)},
	} {
		got, err := parseLimit(tt.text)
		require.NoError(t, err, "%q", tt.text)
		require.Equal(t, tt.want, got, "%q", tt.text)
		back, err := parseLimit(got.String())
		require.NoError(t, err, "%q: its String %q parses", tt.text, got.String())
		require.Equal(t, got, back, "%q: String and UnmarshalText round-trip", tt.text)
	}
	for text, msg := range map[string]string{
		"":                          `keylimit: limit "": want events/period, such as 100/min or 10/s burst 20`,
		"100":                       `keylimit: limit "100": want events/period`,
		"ten/s":                     `keylimit: limit "ten/s": events "ten" is not a whole number`,
		"10/fortnight":              `keylimit: limit "10/fortnight": period "fortnight" is neither a unit (ms, s, min, h, d) nor a duration such as 90s`,
		"10/s burst x":              `keylimit: limit "10/s burst x": burst "x" is not a whole number`,
		"0/s":                       `keylimit: events 0 is below 1 (in "0/s")`,
		"10/s burst 0":              `keylimit: burst 0 is below 1 (in "10/s burst 0")`,
		"10/-1s":                    `keylimit: period -1s is not positive (in "10/-1s")`,
		strings.Repeat("9", 200):    `keylimit: a limit's text is at most 128 bytes, not 200`,
		"99999999999999999999999/s": `keylimit: limit "99999999999999999999999/s": events "99999999999999999999999" is not a whole number`,
	} {
		_, err := parseLimit(text)
		require.ErrorContains(t, err, msg, "%q", text)
	}
}

// TestLimitAsText: a Limit loads from JSON and from a flag, and is written
// back in the same form.
func TestLimitAsText(t *testing.T) {
	var cfg struct {
		Login keylimit.Limit `json:"login"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"login": "5/min burst 10"}`), &cfg))
	require.Equal(t, keylimit.PerMinute(5).WithBurst(10), cfg.Login)
	out, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.JSONEq(t, `{"login": "5/min burst 10"}`, string(out))
	require.ErrorContains(t, json.Unmarshal([]byte(`{"login": "5/min burst 0"}`), &cfg), "keylimit: burst 0 is below 1")

	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var api keylimit.Limit
	fs.TextVar(&api, "api", keylimit.PerSecond(10), "the API's limit")
	require.NoError(t, fs.Parse([]string{"-api", "100/h"}))
	require.Equal(t, keylimit.PerHour(100), api)
	require.Error(t, fs.Parse([]string{"-api", "100/hour/2"}))
}

// TestResultAnd: two Results taken together, field by field, either way
// round; All answers the same for the two limiters that made them.
func TestResultAnd(t *testing.T) {
	boom, bang := errors.New("boom"), errors.New("bang")
	for _, c := range []struct {
		name     string
		r, o     keylimit.Result
		want     keylimit.Result
		wantBack keylimit.Result // o.And(r), where it differs
	}{
		{"both allowed: the lesser Remaining binds, with its Limit",
			allowed(10, 7, 3*s), allowed(5, 2, 8*s), allowed(5, 2, 8*s), keylimit.Result{}},
		{"one refused: refused, its RetryAfter",
			allowed(10, 7, 3*s), refused(5, 0, 2*s, 9*s), refused(5, 0, 2*s, 9*s), keylimit.Result{}},
		{"both refused: the longer wait",
			refused(10, 0, 4*s, 5*s), refused(5, 0, 2*s, 9*s), keylimit.Result{Limit: 10, RetryAfter: 4 * s, ResetAfter: 9 * s},
			keylimit.Result{Limit: 5, RetryAfter: 4 * s, ResetAfter: 9 * s}},
		{"untracked and errors: either is untracked, the first error",
			keylimit.Result{Allowed: true, Limit: 3, Remaining: 3, Untracked: true, Err: boom}, keylimit.Result{Limit: 4, Remaining: 4, Err: bang},
			keylimit.Result{Limit: 3, Remaining: 3, Untracked: true, Err: boom}, keylimit.Result{Limit: 3, Remaining: 3, Untracked: true, Err: bang}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.r.And(c.o))
			back := c.wantBack
			if back == (keylimit.Result{}) {
				back = c.want
			}
			require.Equal(t, back, c.o.And(c.r))
		})
	}
}

// TestResultString: a Result reads as a line of a log.
func TestResultString(t *testing.T) {
	require.Equal(t, "allowed: 7 of 10 left, full in 3s", allowed(10, 7, 3*s).String())
	require.Equal(t, "refused: 0 of 10 left, retry in 1.5s, full in 6s", refused(10, 0, 1500*ms, 6*s).String())
	require.Equal(t, "refused: 2 of 3 left, never passes", keylimit.Result{Limit: 3, Remaining: 2, RetryAfter: keylimit.InfDuration}.String())
	require.Equal(t, "refused (untracked): 0 of 5 left, retry in 1s", keylimit.Result{Limit: 5, RetryAfter: time.Second, Untracked: true}.String())
	require.Equal(t, "refused: 0 of 0 left, never passes: boom",
		keylimit.Result{RetryAfter: keylimit.InfDuration, Err: errors.New("boom")}.String())
}

// TestWindowLimitHasNoBurst: a window ignores Burst, and reports its limits
// without one, so that a reported Limit's FillTime is its Period (quota's w)
// and builds the same window again; a bucket keeps its burst.
func TestWindowLimitHasNoBurst(t *testing.T) {
	given := keylimit.PerMinute(5).WithBurst(3)
	type reporter interface {
		Limit() keylimit.Limit
		LimitOf(key string) keylimit.Limit
		SetKeyLimit(f func(string) keylimit.Limit) error
		Close() error
	}
	fixed, err := keylimit.NewFixedWindow[string](given)
	require.NoError(t, err)
	counter, err := keylimit.NewSlidingCounter[string](given)
	require.NoError(t, err)
	sliding, err := keylimit.NewSlidingWindow[string](given)
	require.NoError(t, err)
	for _, lim := range []reporter{fixed, counter, sliding} {
		defer lim.Close()
		require.Equal(t, keylimit.PerMinute(5), lim.Limit(), "%T", lim)
		require.Equal(t, time.Minute, lim.Limit().FillTime(), "%T", lim)
		require.NoError(t, lim.SetKeyLimit(func(string) keylimit.Limit { return keylimit.PerHour(7).WithBurst(2) }))
		require.Equal(t, keylimit.PerHour(7), lim.LimitOf("k"), "%T", lim)
		again, err := keylimit.NewFixedWindow[string](lim.Limit())
		require.NoError(t, err, "%T: the reported limit is valid", lim)
		again.Close()
	}
	bucket, err := keylimit.NewTokenBucket[string](given)
	require.NoError(t, err)
	defer bucket.Close()
	require.Equal(t, given, bucket.Limit())
	require.Equal(t, 36*time.Second, bucket.Limit().FillTime(), "a bucket of 3 at 5 a minute fills in 36 s")
}
