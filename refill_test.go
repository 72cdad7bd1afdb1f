package keylimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"

	"github.com/keylimit/keylimit"
)

// refillCase is one row of issue 23's table: a limiter brought to a state
// on a mock clock, and the RefillAfter it must then report.
type refillCase struct {
	name  string
	kind  *kind
	limit keylimit.Limit
	// steps brings the key "k" to the row's state, from the epoch; the
	// Result of the last is the one checked.
	steps  []refillStep
	refill time.Duration // the RefillAfter the last step reports
	retry  time.Duration // its RetryAfter (0: admitted)
	reset  time.Duration // its ResetAfter, which t was before issue 23
}

type refillStep struct {
	at time.Duration
	n  int
}

// refillCases are issue 23's rows. Before RefillAfter, the RateLimit
// field's t was ResetAfter (reset); it is now RefillAfter.
var refillCases = []refillCase{
	{"TokenBucket PerSecond(1).WithBurst(5), drained", tokenBucket, keylimit.PerSecond(1).WithBurst(5),
		[]refillStep{{0, 5}, {0, 1}}, time.Second, time.Second, 5 * time.Second},
	{"TokenBucket PerSecond(1).WithBurst(5), admitted with 2 left", tokenBucket, keylimit.PerSecond(1).WithBurst(5),
		[]refillStep{{0, 3}}, time.Second, 0, 3 * time.Second},
	{"TokenBucket PerMinute(10), drained", tokenBucket, keylimit.PerMinute(10),
		[]refillStep{{0, 10}, {0, 1}}, 6 * time.Second, 6 * time.Second, time.Minute},
	// 5 at 0 s and 5 at 40 s: at 45 s the oldest leave at 60 s, the newest
	// at 100 s.
	{"SlidingWindow PerMinute(10)", slidingWindow, keylimit.PerMinute(10),
		[]refillStep{{0, 5}, {40 * time.Second, 5}, {45 * time.Second, 1}}, 15 * time.Second, 15 * time.Second, 55 * time.Second},
	// 10 in [0, 60 s) weigh 10 × 50/60 = 8.33, so 9, at 70 s: 1 more is
	// taken, and the next fits when they weigh 8, 10 × 48/60, at 72 s; the
	// count is gone at 180 s.
	{"SlidingCounter PerMinute(10)", slidingCounter, keylimit.PerMinute(10),
		[]refillStep{{50 * time.Second, 10}, {70 * time.Second, 1}}, 2 * time.Second, 0, 110 * time.Second},
	{"FixedWindow PerMinute(10)", fixedWindow, keylimit.PerMinute(10),
		[]refillStep{{5 * time.Second, 10}, {5 * time.Second, 1}}, 55 * time.Second, 55 * time.Second, 55 * time.Second},
}

// TestRefillAfter re-measures issue 23's table in memory: RefillAfter is
// the time until one more event is admitted. A Peek RefillAfter − 1 ns
// later finds no more quota than the row's state; at RefillAfter, one more.
func TestRefillAfter(t *testing.T) {
	for _, c := range refillCases {
		t.Run(c.name, func(t *testing.T) {
			lim, mock := c.kind.mock(t, c.limit)
			t0 := mock.Now()
			var r keylimit.Result
			for _, st := range c.steps {
				mock.Set(t0.Add(st.at))
				r = lim.Take("k", st.n)
			}
			require.Equal(t, c.refill, r.RefillAfter, "%v", r)
			require.Equal(t, c.retry, r.RetryAfter, "%v", r)
			require.Equal(t, c.reset, r.ResetAfter, "%v", r)
			require.Equal(t, c.retry == 0, r.Allowed)
			require.LessOrEqual(t, r.RefillAfter, c.limit.Period, "never beyond the window")
			checkRefill(t, lim, mock, "k", r)
		})
	}
}

// checkRefill checks that r, key's Result at mock's time, says when key's
// quota grows: no more at RefillAfter − 1 ns, at least one more at
// RefillAfter. The clock is left there.
func checkRefill(t *testing.T, lim keylimit.Limiter[string], mock *clock.Mock, key string, r keylimit.Result) {
	t.Helper()
	require.Positive(t, r.RefillAfter)
	at := mock.Now()
	mock.Set(at.Add(r.RefillAfter - time.Nanosecond))
	require.Equal(t, r.Remaining, lim.Peek(key).Remaining, "1 ns before RefillAfter %v", r.RefillAfter)
	mock.Set(at.Add(r.RefillAfter))
	require.Greater(t, lim.Peek(key).Remaining, r.Remaining, "at RefillAfter %v", r.RefillAfter)
}

// TestRefillAfterWhole pins RefillAfter 0 for a key with its whole quota,
// a new one and one whose admissions have all left.
func TestRefillAfterWhole(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim, mock := k.mock(t, keylimit.PerMinute(10))
			require.Zero(t, lim.Peek("k").RefillAfter, "a new key")
			r := lim.Take("k", 1)
			require.Positive(t, r.RefillAfter)
			mock.Add(r.ResetAfter)
			require.Zero(t, lim.Peek("k").RefillAfter, "after ResetAfter")
		})
	}
}

// TestResultAndRefill pins And's RefillAfter: the lesser Remaining's, the
// longer of a tie; and All's, whose binding limit is the lesser.
func TestResultAndRefill(t *testing.T) {
	a := keylimit.Result{Allowed: true, Limit: 5, Remaining: 1, RefillAfter: time.Second}
	b := keylimit.Result{Allowed: true, Limit: 10, Remaining: 4, RefillAfter: 6 * time.Second}
	require.Equal(t, time.Second, a.And(b).RefillAfter)
	require.Equal(t, time.Second, b.And(a).RefillAfter)
	b.Remaining = 1
	require.Equal(t, 6*time.Second, a.And(b).RefillAfter, "a tie: the lesser rises when both have")

	mock := clock.NewMock()
	bucket := build(t, keylimit.NewTokenBucket[string], keylimit.PerSecond(1).WithBurst(5), keylimit.WithClock(mock))
	fixed := build(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(100), keylimit.WithClock(mock))
	lim := keylimit.All[string](bucket, fixed)
	r := lim.Take("k", 5)
	require.Equal(t, time.Second, r.RefillAfter, "the bucket binds: %v", r)
	checkRefill(t, lim, mock, "k", r)
}

// ExampleResult_refill shows RefillAfter beside ResetAfter: a drained
// bucket of 10 a minute has its next token in 6 s, its whole burst in 60 s.
func ExampleResult_refill() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()
	lim.AllowN("k", 10)
	r := lim.Take("k", 1)
	fmt.Println(r.Allowed, r.RetryAfter, r.RefillAfter, r.ResetAfter)
	mock.Add(r.RefillAfter)
	fmt.Println(lim.Allow("k"))
	// Output:
	// false 6s 6s 1m0s
	// true
}
