package benchmarks

import (
	"testing"
	"time"
)

// TestHotKeyContention has 64 goroutines ask each contender for one new key
// at once, on limits whose clock barely moves: a burst of 100 (HotKeyQuota)
// and a burst deep enough that thousands of admissions race. keylimit must
// admit exactly the bound, every round, with no error. What the peers do is
// recorded, not asserted: BENCHMARKS.md publishes it, whatever it is.
func TestHotKeyContention(t *testing.T) {
	goroutines, attempts, rounds := 64, 2000, 3
	if testing.Short() {
		attempts, rounds = 500, 2
	}
	deep := Quota{Burst: goroutines * attempts * 3 / 4, Period: time.Hour}
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
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
