package keylimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// statser is what every limiter type has for metrics.
type statser interface {
	keylimit.Limiter[string]
	Stats() keylimit.Stats
	Close() error
}

// statsTypes builds each limiter type on a frozen mock clock.
var statsTypes = []struct {
	name string
	new  func(l keylimit.Limit, opts ...keylimit.Option) (statser, error)
}{
	{"TokenBucket", func(l keylimit.Limit, o ...keylimit.Option) (statser, error) {
		return keylimit.NewTokenBucket[string](l, o...)
	}},
	{"FixedWindow", func(l keylimit.Limit, o ...keylimit.Option) (statser, error) {
		return keylimit.NewFixedWindow[string](l, o...)
	}},
	{"SlidingWindow", func(l keylimit.Limit, o ...keylimit.Option) (statser, error) {
		return keylimit.NewSlidingWindow[string](l, o...)
	}},
	{"SlidingCounter", func(l keylimit.Limit, o ...keylimit.Option) (statser, error) {
		return keylimit.NewSlidingCounter[string](l, o...)
	}},
}

// TestStatsCountExactlyUnderContention: 16 goroutines make 2,000 calls each
// on one key of a quota of 700 on a frozen clock; Stats counts every one,
// exactly, whichever call path (Allow, AllowN, Take) made it.
func TestStatsCountExactlyUnderContention(t *testing.T) {
	const goroutines, calls, quota = 16, 2000, 700
	for _, typ := range statsTypes {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(keylimit.PerHour(quota), keylimit.WithClock(clock.NewMock()), keylimit.WithStats())
			require.NoError(t, err)
			defer lim.Close()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range calls {
						switch (g + i) % 3 {
						case 0:
							lim.Allow("k")
						case 1:
							lim.AllowN("k", 1)
						default:
							lim.Take("k", 1)
						}
					}
				}()
			}
			wg.Wait()
			lim.Peek("k") // reports, counts nothing
			st := lim.Stats()
			require.Equal(t, uint64(quota), st.Admitted, "admitted")
			require.Equal(t, uint64(goroutines*calls-quota), st.Refused, "refused")
			require.Equal(t, 1, st.Keys, "keys")
		})
	}
}

// TestStatsWithoutWithStats: decisions are not counted unless asked for;
// keys, evictions and untracked requests always are.
func TestStatsWithoutWithStats(t *testing.T) {
	for _, typ := range statsTypes {
		t.Run(typ.name, func(t *testing.T) {
			mock := clock.NewMock()
			lim, err := typ.new(keylimit.PerSecond(1), keylimit.WithClock(mock), keylimit.WithMaxKeys(2),
				keylimit.WithEvictionInterval(time.Millisecond))
			require.NoError(t, err)
			defer lim.Close()
			require.True(t, lim.Allow("a"))
			require.True(t, lim.Allow("b"))
			require.False(t, lim.Allow("c"), "c is over the key cap")
			require.True(t, lim.Take("d", 1).Untracked, "d is over the key cap")
			st := lim.Stats()
			require.Equal(t, keylimit.Stats{Keys: 2, Untracked: 2}, st)

			mock.Add(time.Hour) // every key idle: the evictor forgets both
			require.Eventually(t, func() bool { return lim.Stats().Evicted == 2 }, 5*time.Second, time.Millisecond)
			require.Equal(t, keylimit.Stats{Keys: 0, Untracked: 2, Evicted: 2}, lim.Stats())
		})
	}
}

// TestStatsAllocs: counting decisions allocates nothing (every call here
// is admitted).
func TestStatsAllocs(t *testing.T) {
	for _, typ := range statsTypes {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(keylimit.PerHour(10_000), keylimit.WithStats())
			require.NoError(t, err)
			defer lim.Close()
			lim.Allow("k")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("k") }), "Allow allocates")
		})
	}
}
