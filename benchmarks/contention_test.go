package benchmarks

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
)

// TestHotKeyContention has 64 goroutines ask each contender for one new key
// at once, on limits whose clock barely moves: a burst of 100 (HotKeyQuota)
// and a burst deep enough that thousands of admissions race (as deep as a
// SlidingWindow can hold). keylimit must admit exactly the bound, every
// round, with no error. What the peers do is recorded, not asserted:
// BENCHMARKS.md publishes it, whatever it is.
func TestHotKeyContention(t *testing.T) {
	goroutines, attempts, rounds := 64, 2000, 3
	if testing.Short() {
		attempts, rounds = 500, 2
	}
	deep := Quota{Burst: keylimit.MaxSlidingWindowEvents, Period: time.Hour}
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			rounds := rounds
			if c.Kind != Keylimit {
				rounds = 1 // recorded, not asserted: once is enough here
			}
			for _, q := range []Quota{HotKeyQuota, deep} {
				for round := range rounds {
					a, err := Contend(c, q, goroutines, attempts)
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("burst %d, round %d: %d goroutines × %d calls: admitted %d, bound %d, errors %d",
						q.Burst, round, a.Goroutines, a.Attempts, a.Admitted, a.Bound, a.Errors)
					if c.Kind != Keylimit {
						continue
					}
					if a.Admitted < q.Burst || a.Admitted > a.Bound || a.Errors != 0 {
						t.Errorf("burst %d, round %d: admitted %d (bound %d), %d errors; want between the burst and the bound, no error",
							q.Burst, round, a.Admitted, a.Bound, a.Errors)
					}
				}
			}
		})
	}
}

func TestBoundsCountRefillAndWindows(t *testing.T) {
	q := Quota{Burst: 100, Period: time.Hour}
	hour := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		bound      Bound
		start, end time.Time
		want       int
	}{
		{"bucket, a second", BucketBound, hour, hour.Add(time.Second), 100},
		{"bucket, 36 s refill one", BucketBound, hour, hour.Add(36 * time.Second), 101},
		{"window, inside one hour", EpochWindowBound, hour.Add(time.Minute), hour.Add(59 * time.Minute), 100},
		{"window, across a boundary", EpochWindowBound, hour.Add(-time.Second), hour.Add(time.Second), 200},
	} {
		if got := tc.bound(q, tc.start, tc.end); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
