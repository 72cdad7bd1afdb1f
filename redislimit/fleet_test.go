package redislimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestFleetAdmitsTheGlobalLimit: three instances, each with its own client
// (its own connections), hammer one key from many goroutines each; between
// them they admit exactly the limit, as one instance would. With in-memory
// limiters they would admit three times the limit.
func TestFleetAdmitsTheGlobalLimit(t *testing.T) {
	fleetAdmitsTheLimit(t, func(t testing.TB) redis.UniversalClient { return shared.client(t) })
}

// TestClockSkewDoesNotMatter: three instances whose clocks disagree by
// minutes (one 5 min ahead, one 3 min behind) decide on Redis time alone. A
// key drained on one is refused on the others, with the same RetryAfter; a
// limiter that sent its own time to Redis would see a bucket 5 minutes
// fuller, or a different window, on the instance ahead.
func TestClockSkewDoesNotMatter(t *testing.T) {
	offsets := []time.Duration{0, 5 * time.Minute, -3 * time.Minute}
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			key := testKey(t, "k")
			var fleet []keylimit.Limiter[string]
			for _, off := range offsets {
				lim, err := typ.new(shared.client(t), keylimit.PerMinute(4),
					redislimit.WithTimeout(patient), keylimit.WithClock(skewedClock{clock.NewMock(), off}))
				require.NoError(t, err)
				fleet = append(fleet, lim)
			}
			require.True(t, fleet[0].AllowN(key, 4), "AllowN(4) on a new key was refused")
			start := time.Now()
			first := fleet[0].Take(key, 1)
			require.False(t, first.Allowed || first.RetryAfter <= 0, "instance 0 after the quota: %+v, want refused", first)
			for i, lim := range fleet[1:] {
				for range 3 { // the second and third calls come from the deny cache
					r := lim.Take(key, 1)
					require.False(t, r.Allowed || r.Remaining != 0, "instance %d, clock %v off: %+v, want refused with Remaining 0", i+1, offsets[i+1], r)
					// Both are durations from Redis's time of the call: they
					// differ by the time between the calls, and for an answer
					// of the deny cache by one round trip more (it counts the
					// refusal from before the round trip).
					d, most := first.RetryAfter-r.RetryAfter, 2*time.Since(start)+time.Millisecond
					require.False(t, d < -time.Millisecond || d > most, "instance %d, clock %v off: RetryAfter %v, want instance 0's %v less at most %v",
						i+1, offsets[i+1], r.RetryAfter, first.RetryAfter, most)
				}
			}
		})
	}
}
