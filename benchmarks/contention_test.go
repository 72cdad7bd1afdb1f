package benchmarks

import (
	"flag"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// full runs the contention counts at the size BENCHMARKS.md publishes.
var full = flag.Bool("full", false, "count contention at the size BENCHMARKS.md publishes: "+
	"every contender, 5 rounds, up to a burst of a million (slow under -race)")

// contentionCase is one count: a quota, and how many goroutines ask how
// many times each, in how many rounds.
type contentionCase struct {
	quota                        Quota
	goroutines, attempts, rounds int
}

// contentionCases are the counts TestHotKeyContention makes. By default: a
// burst of 100, and one deep enough that thousands of admissions race (as
// deep as a SlidingWindow can hold). With -full: a burst of 100 and one of a
// million, where every call until the burst is spent is an admission that
// races with the others.
func contentionCases() []contentionCase {
	if *full {
		return []contentionCase{{HotKeyQuota, 64, 10_000, 5}, {DeepBurstQuota, 64, 20_000, 5}}
	}
	const attempts = 2000
	deep := Quota{Burst: keylimit.MaxSlidingWindowEvents, Period: time.Hour}
	return []contentionCase{{HotKeyQuota, 64, attempts, 3}, {deep, 64, attempts, 3}}
}

// TestHotKeyContention has 64 goroutines ask each contender for one new key
// at once, on limits whose clock barely moves. keylimit must admit between
// the burst and the bound, every round, with no error. What the peers do is
// recorded, not asserted (by default in one round): BENCHMARKS.md publishes
// it, whatever it is, from the lines this test logs, one per round:
//
//	contention contender=NAME burst=B goroutines=G attempts=A admitted=N bound=M errors=E
func TestHotKeyContention(t *testing.T) {
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			for _, cc := range contentionCases() {
				rounds := cc.rounds
				if c.Kind != Keylimit && !*full {
					rounds = 1
				}
				for round := range rounds {
					a, err := Contend(c, cc.quota, cc.goroutines, cc.attempts)
					if err != nil && c.Name == "keylimit-slidingwindow" && cc.quota.Burst > keylimit.MaxSlidingWindowEvents {
						t.Logf("contention contender=%s burst=%d unbuildable", c.Name, cc.quota.Burst)
						break
					}
					require.NoError(t, err)
					t.Logf("contention contender=%s burst=%d goroutines=%d attempts=%d admitted=%d bound=%d errors=%d",
						c.Name, cc.quota.Burst, a.Goroutines, a.Attempts, a.Admitted, a.Bound, a.Errors)
					if c.Kind != Keylimit {
						continue
					}
					require.GreaterOrEqual(t, a.Admitted, cc.quota.Burst, "burst %d, round %d: admitted", cc.quota.Burst, round)
					require.LessOrEqual(t, a.Admitted, a.Bound, "burst %d, round %d: admitted", cc.quota.Burst, round)
					require.Zero(t, a.Errors, "burst %d, round %d: errors", cc.quota.Burst, round)
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
		require.Equal(t, tc.want, tc.bound(q, tc.start, tc.end), tc.name)
	}
}
