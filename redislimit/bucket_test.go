package redislimit_test

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestBucketIsExactToTheNanosecond: the script keeps the TAT in ns although
// Lua has only doubles. PerSecond(3) refills a token every 333,333,334 ns, a
// number no µs or float clock would keep; the stored TAT is a µs instant
// of Redis time plus exactly 2 intervals, stored with the interval it
// counts in, and the Results carry the intervals to the ns.
func TestBucketIsExactToTheNanosecond(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewTokenBucket(c, "test", keylimit.PerSecond(3), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	iv := keylimit.PerSecond(3).WithBurst(1).FillTime()
	require.Equal(t, 333_333_334*time.Nanosecond, iv, "Interval")
	key := testKey(t, "k")
	before := redisTime(t, c)
	r := lim.Take(key, 2)
	after := redisTime(t, c)
	require.True(t, r.Allowed, "Take(2) on a new key: %v", r)
	require.Equal(t, 1, r.Remaining, "Take(2) on a new key: Remaining")
	require.Equal(t, 2*iv, r.ResetAfter, "Take(2) on a new key: ResetAfter")

	stored, err := c.Get(context.Background(), stateKey(lim, key)).Result()
	require.NoError(t, err)
	// A fresh take's state: "@seconds ns a interval", the TAT seconds + ns + a.
	f := strings.Fields(stored)
	require.Len(t, f, 4, "stored state %q", stored)
	require.Equal(t, "333333334", f[3], "the interval stored with the TAT")
	var parts [3]int64
	for i, s := range []string{strings.TrimPrefix(f[0], "@"), f[1], f[2]} {
		v, ok := new(big.Int).SetString(s, 10)
		require.True(t, ok && v.IsInt64(), "stored state %q", stored)
		parts[i] = v.Int64()
	}
	require.Equal(t, int64(2*iv), parts[2], "stored state %q: the take's a", stored)
	decided := parts[0]*1e9 + parts[1] // the script's now, in ns
	require.Zero(t, decided%1000, "stored TAT - 2 intervals = %d: not a whole µs", decided)
	require.True(t, decided >= before-1000 && decided <= after, "stored TAT - 2 intervals = %d, want within Redis's [%d, %d]", decided, before, after)

	// Refused: RetryAfter = TAT + 2 intervals - tau - now and ResetAfter =
	// TAT - now, tau being 3 intervals: their difference is exactly one
	// interval, and TAT - ResetAfter is a µs instant.
	r = lim.Take(key, 2)
	require.False(t, r.Allowed, "Take(2) with 1 left: %v", r)
	require.Equal(t, 1, r.Remaining, "Take(2) with 1 left: Remaining")
	require.Equal(t, iv, r.ResetAfter-r.RetryAfter, "Take(2) with 1 left: ResetAfter - RetryAfter")
	require.Zero(t, (decided+parts[2]-int64(r.ResetAfter))%1000, "TAT - ResetAfter: not a whole µs")
}
