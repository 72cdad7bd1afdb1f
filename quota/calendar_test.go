package quota_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// A tier with a monthly plan in the client's zone, beside a per-second
// bucket: RateLimit-Policy's w for the month is the length of the key's
// current month in its zone (February 2026 in Bucharest: 28 days; March:
// 31 days less the hour the clock skips), RateLimit's t the seconds to its
// end, and Retry-After of a refusal the same; the month resets at local
// midnight on the 1st. A gold tier's plan is larger and its month is New
// York's.
func TestDecideCalendarTier(t *testing.T) {
	bucharest, err := time.LoadLocation("Europe/Bucharest")
	require.NoError(t, err)
	newYork, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 2, 28, 23, 0, 0, 0, bucharest))
	month := func(n int, loc *time.Location) *keylimit.FixedWindow[string] {
		w, err := keylimit.NewFixedWindow[string](keylimit.PerCalendar(n, keylimit.Monthly, loc), keylimit.WithClock(mock))
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		return w
	}
	d := newDecider(t, quota.Config{
		Policies: []quota.Policy{{Name: "second", Limiter: newBucket(t, keylimit.PerSecond(10), mock)}, {Name: "month", Limiter: month(2, bucharest)}},
		Tiers:    map[string][]quota.Policy{"gold": {{Name: "month", Limiter: month(3, newYork)}}},
	})
	const feb, mar = `"second";q=10;w=1, "month";q=2;w=2419200`, `"second";q=10;w=1, "month";q=2;w=2674800`
	for i, step := range []struct {
		at   time.Time
		want decided
	}{
		{time.Date(2026, 2, 28, 23, 0, 0, 0, bucharest), decided{quota.Proceed, "month", `"second";r=9;t=1, "month";r=1;t=3600`, feb, ""}},
		{time.Date(2026, 2, 28, 23, 30, 0, 0, bucharest), decided{quota.Proceed, "month", `"second";r=9;t=1, "month";r=0;t=1800`, feb, ""}},
		{time.Date(2026, 2, 28, 23, 59, 0, 0, bucharest), decided{quota.Refuse, "month", `"second";r=10;t=0, "month";r=0;t=60`, feb, "60"}},
		{time.Date(2026, 3, 1, 0, 0, 0, 0, bucharest), decided{quota.Proceed, "month", `"second";r=9;t=1, "month";r=1;t=2674800`, mar, ""}},
	} {
		mock.Set(step.at)
		got, _ := decide(t, d, "k", "", 1)
		require.Equal(t, step.want, got, "step %d", i)
	}
	// Gold: New York's month, still February (28 days) when Bucharest's
	// March began, had 7 hours to run.
	got, _ := decide(t, d, "k", "gold", 3)
	require.Equal(t, decided{quota.Proceed, "month", `"month";r=0;t=25200`, `"month";q=3;w=2419200`, ""}, got)
	got, _ = decide(t, d, "k", "gold", 1)
	require.Equal(t, decided{quota.Refuse, "month", `"month";r=0;t=25200`, `"month";q=3;w=2419200`, "25200"}, got)
}
