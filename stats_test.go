package keylimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// TestStatsCountExactlyUnderContention: 16 goroutines make 2,000 calls each
// on one key of a quota of 700 on a frozen clock; Stats counts every one,
// exactly, whichever call path (Allow, AllowN, Take) made it.
func TestStatsCountExactlyUnderContention(t *testing.T) {
	const goroutines, calls, quota = 16, 2000, 700
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim, _ := k.mock(t, keylimit.PerHour(quota), keylimit.WithStats())
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
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
				})
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
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lim, mock := k.mock(t, keylimit.PerSecond(1), keylimit.WithMaxKeys(2), keylimit.WithEvictionInterval(time.Millisecond))
			require.True(t, lim.Allow("a"))
			require.True(t, lim.Allow("b"))
			require.False(t, lim.Allow("c"), "c is over the key cap")
			require.True(t, lim.Take("d", 1).Untracked, "d is over the key cap")
			// The evictor sweeps every real millisecond: one that ran between a
			// key's creation and its first event found it fresh, forgot it and
			// counted it, and the event made it anew. So Evicted is whatever it
			// is here, and exactly 2 more once both keys go idle.
			st := lim.Stats()
			before := st.Evicted
			require.Equal(t, keylimit.Stats{Keys: 2, Untracked: 2, Evicted: before}, st)
			require.LessOrEqual(t, before, uint64(2), "forgotten while fresh: at most once each")

			mock.Add(time.Hour) // every key idle: the evictor forgets both
			waitFor(t, "the evictor to forget both keys", func() bool { return lim.Stats().Evicted == before+2 })
			require.Equal(t, keylimit.Stats{Keys: 0, Untracked: 2, Evicted: before + 2}, lim.Stats())
		})
	}
}

// TestStatsAllocs: counting decisions allocates nothing, admitted or
// refused.
func TestStatsAllocs(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			testAllocs(t, k.make(t, keylimit.PerHour(10_000), keylimit.WithStats()), k.make(t, keylimit.PerHour(1), keylimit.WithStats()))
		})
	}
}
