package keylimit

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestStaleReadingOnAMovedStateIsReadAgain pins what DESIGN.md ("Stale
// clock readings") relies on: a call reads the clock before it loads the
// key's state, so another caller may admit, on a later reading, between
// the two. The call's reading is then older than an admission the state
// holds, and a refusal on it is decided again on a reading taken after the
// load. Here the key is emptied 50 ms after the call's reading, and the
// call's load comes 600 ms after it: a bucket has 5.5 tokens again by
// then, a fixed window is in its next second, a sliding counter's previous
// second weighs 5 of its 10. Decided on its first reading alone, the call
// would be refused (the fleet demo's 9 of a burst of 10).
func TestStaleReadingOnAMovedStateIsReadAgain(t *testing.T) {
	for _, k := range []struct {
		name string
		make func(Limit, clock.Clock) (Limiter[string], *timeSource)
	}{
		{"TokenBucket", func(l Limit, c clock.Clock) (Limiter[string], *timeSource) {
			b, err := NewTokenBucket[string](l, WithClock(c))
			require.NoError(t, err)
			t.Cleanup(func() { b.Close() })
			return b, &b.keys.clock
		}},
		{"FixedWindow", func(l Limit, c clock.Clock) (Limiter[string], *timeSource) {
			f, err := NewFixedWindow[string](l, WithClock(c))
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f, &f.w.keys.clock
		}},
		{"SlidingCounter", func(l Limit, c clock.Clock) (Limiter[string], *timeSource) {
			s, err := NewSlidingCounter[string](l, WithClock(c))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s, &s.w.keys.clock
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			clk := clock.NewMock()
			lim, ts := k.make(PerSecond(10), clk)
			require.True(t, lim.Allow("k")) // the key is there, full again below
			// 2.9 s into the windows' grid, which starts at the limiter's
			// creation: the previous second is empty.
			clk.Add(2900 * time.Millisecond)
			readings := 0
			ts.afterRead = func() {
				if readings++; readings > 1 {
					return
				}
				// Between the call's first reading and its load.
				clk.Add(50 * time.Millisecond)
				require.True(t, lim.Take("k", 10).Allowed)
				clk.Add(550 * time.Millisecond)
			}
			require.True(t, lim.Allow("k"), "refused on the first reading, admitted on one after the load")
			require.Equal(t, 3, readings, "the call's, the other caller's, and the call's again")
		})
	}
}

// TestStaleReadingOnAConvertedBucketIsReadAgain is the same for a change of
// limit: a bucket's conversion leaves a TAT that has passed as it is, and
// only the limit it is under says the state moved. The call reads the
// clock 10 ms after the key was emptied; the limit goes from 10 to 20 a
// second and the key is converted, 2 s later, before the call's load.
// Decided under the new limit on its first reading, the call would be
// refused (50 ms of a 1 s burst short); on one after the load, the bucket
// is full.
func TestStaleReadingOnAConvertedBucketIsReadAgain(t *testing.T) {
	clk := clock.NewMock()
	b, err := NewTokenBucket[string](PerSecond(10), WithClock(clk))
	require.NoError(t, err)
	defer b.Close()
	require.True(t, b.Take("k", 10).Allowed)
	clk.Add(10 * time.Millisecond)
	readings := 0
	b.keys.clock.afterRead = func() {
		if readings++; readings > 1 {
			return
		}
		clk.Add(2 * time.Second)
		require.NoError(t, b.SetLimit(PerSecond(20)))
		// More than the burst: converts the key, admits nothing.
		require.False(t, b.Take("k", 100).Allowed)
	}
	require.True(t, b.Allow("k"), "refused on the first reading, admitted on one after the load")
	require.Equal(t, 19, b.Peek("k").Remaining)
}
