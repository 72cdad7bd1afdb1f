package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// Whatever a limiter reports, the fields are valid: a name is a quoted
// String with '"' and '\' escaped; numbers are Integers of at most 15
// digits, never negative; r is at most q; times are rounded up; t is
// RefillAfter, at most w; w is the Window set, or the limiter's Period.
func TestFieldValues(t *testing.T) {
	for _, tc := range []struct {
		name            string
		policy          string
		window          time.Duration
		result          keylimit.Result
		rateLimit       string
		rateLimitPolicy string
	}{
		{"plain", "minute", 0, keylimit.Result{Allowed: true, Limit: 10, Remaining: 3, RefillAfter: 41500 * time.Millisecond, ResetAfter: 50 * time.Second},
			`"minute";r=3;t=42`, `"minute";q=10;w=60`},
		{"t is at most w", "minute", 0, keylimit.Result{Allowed: true, Limit: 10, Remaining: 0, RefillAfter: 66 * time.Second, ResetAfter: 110 * time.Second},
			`"minute";r=0;t=60`, `"minute";q=10;w=60`},
		{"escaped name", `a"b\c`, 0, keylimit.Result{Allowed: true, Limit: 1, Remaining: 1},
			`"a\"b\\c";r=1;t=0`, `"a\"b\\c";q=1;w=60`},
		{"negative numbers are 0", "m", 0, keylimit.Result{Limit: -5, Remaining: -2, ResetAfter: -time.Second},
			`"m";r=0;t=0`, `"m";q=0;w=60`},
		{"r is at most q", "m", 0, keylimit.Result{Allowed: true, Limit: 3, Remaining: 9},
			`"m";r=3;t=0`, `"m";q=3;w=60`},
		{"huge numbers are the largest Integer", "m", 1 << 62, keylimit.Result{Allowed: true, Limit: 1 << 62, Remaining: 1 << 62, RefillAfter: 1 << 62, ResetAfter: 1 << 62},
			`"m";r=999999999999999;t=4611686019`, `"m";q=999999999999999;w=4611686019`},
		{"a Window set, rounded up", "m", 1500 * time.Millisecond, keylimit.Result{Allowed: true, Limit: 2, Remaining: 1, RefillAfter: time.Nanosecond, ResetAfter: time.Nanosecond},
			`"m";r=1;t=1`, `"m";q=2;w=2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := &scripted{result: tc.result}
			d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: tc.policy, Limiter: lim, Window: tc.window}}})
			v, err := d.Decide(context.Background(), "k", "", 1)
			require.NoError(t, err)
			require.Equal(t, tc.rateLimit, v.RateLimit())
			require.Equal(t, tc.rateLimitPolicy, v.RateLimitPolicy())
		})
	}
}

// w of a token bucket is the time it takes to refill from empty, Burst ×
// Period / Events, exactly: PerSecond(3) refills in 1 s, not 1.000000002 s.
// A SetLimit shows in the next request's.
func TestFieldWindowOfABucket(t *testing.T) {
	mock := clock.NewMock()
	b := newBucket(t, keylimit.PerSecond(3), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "p", Limiter: b}}})
	got, _ := decide(t, d, "k", "", 1)
	require.Equal(t, `"p";q=3;w=1`, got.rateLimitPolicy)
	require.NoError(t, b.SetLimit(keylimit.PerHour(100).WithBurst(20)))
	got, _ = decide(t, d, "k", "", 1)
	require.Equal(t, `"p";q=20;w=720`, got.rateLimitPolicy)
}
