package redislimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keylimit/keylimit"
	fields "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
)

// TestRefillAfterTable re-measures issue 23's table on Redis, through the
// quota package's fields: t is the seconds until one more request passes
// (1 s before it, still refused; at it, admitted), never beyond w, and
// Retry-After is never earlier. Before issue 23, t was ResetAfter: 5, 3,
// 60, 55 and 55 in these rows.
func TestRefillAfterTable(t *testing.T) {
	c := shared.client(t)
	type step struct {
		at time.Duration
		n  int
	}
	for _, row := range []struct {
		name      string
		typ       string
		limit     keylimit.Limit
		steps     []step // the last is decided through quota, cost 1
		rateLimit string // the last step's RateLimit
		retry     string // its Retry-After ("": admitted)
	}{
		{"TokenBucket PerSecond(1).WithBurst(5), drained", "TokenBucket", keylimit.PerSecond(1).WithBurst(5),
			[]step{{0, 5}, {0, 1}}, `"p";r=0;t=1`, "1"},
		{"TokenBucket PerSecond(1).WithBurst(5), admitted with 2 left", "TokenBucket", keylimit.PerSecond(1).WithBurst(5),
			[]step{{0, 2}, {0, 1}}, `"p";r=2;t=1`, ""},
		{"TokenBucket PerMinute(10), drained", "TokenBucket", keylimit.PerMinute(10),
			[]step{{0, 10}, {0, 1}}, `"p";r=0;t=6`, "6"},
		{"SlidingWindow PerMinute(10)", "SlidingWindow", keylimit.PerMinute(10),
			[]step{{0, 5}, {40 * time.Second, 5}, {45 * time.Second, 1}}, `"p";r=0;t=15`, "15"},
		{"FixedWindow PerMinute(10)", "FixedWindow", keylimit.PerMinute(10),
			[]step{{5 * time.Second, 10}, {5 * time.Second, 1}}, `"p";r=0;t=55`, "55"},
	} {
		t.Run(row.name, func(t *testing.T) {
			mock := newMock() // on a minute
			t0 := mock.Now()
			lim, err := typeNamed(row.typ)(c, row.limit, redislimit.WithTimeout(patient), keylimit.WithClock(mock),
				redislimit.WithScriptClock(mock), redislimit.WithDenyCacheSize(0), redislimit.WithPrefix(testKey(t, "refill")+":"))
			require.NoError(t, err)
			d, err := fields.New(fields.Config{Policies: []fields.Policy{{Name: "p", Limiter: lim}}})
			require.NoError(t, err)
			key := testKey(t, "k")
			last := row.steps[len(row.steps)-1]
			for _, st := range row.steps[:len(row.steps)-1] {
				mock.Set(t0.Add(st.at))
				require.True(t, lim.AllowN(key, st.n), "AllowN(%d) at %v", st.n, st.at)
			}
			mock.Set(t0.Add(last.at))
			v, err := d.Decide(context.Background(), key, "", last.n)
			require.NoError(t, err)
			require.Equal(t, row.rateLimit, v.RateLimit())
			require.Equal(t, row.retry, v.RetryAfter())
			secs := v.Decision.Result.RefillAfter.Round(time.Second)
			// w as in memory: a bucket's is the time it takes to fill from
			// empty (5 s for PerSecond(1).WithBurst(5)), a window's its Period.
			w := row.limit.Period
			if row.typ == "TokenBucket" {
				w = row.limit.FillTime()
			}
			require.Contains(t, v.RateLimitPolicy(), fmt.Sprintf(";w=%d", int64(w/time.Second)))
			require.LessOrEqual(t, secs, w, "t is at most w")
			r := v.Decision.Result
			// One second before t, no more quota; at t, more.
			mock.Set(t0.Add(last.at + secs - time.Second))
			require.Equal(t, r.Remaining, lim.Peek(key).Remaining, "t−1 s")
			if row.retry != "" {
				require.False(t, lim.Allow(key), "t−1 s")
			}
			mock.Set(t0.Add(last.at + secs))
			require.Greater(t, lim.Peek(key).Remaining, r.Remaining, "at t")
			require.True(t, lim.Allow(key), "at t")
		})
	}
}
