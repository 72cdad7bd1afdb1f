package redislimit_test

import (
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestStats counts a limiter's work exactly: requests admitted and refused
// (by Redis, the deny cache, the failure policy, or as impossible), round
// trips and the ones that failed, the calls the failure policy answered,
// and the deny cache's answers. Keys is not known for Redis: 0.
func TestStats(t *testing.T) {
	c := shared.client(t)
	f := addFaults(c)
	lim, err := redislimit.NewFixedWindow(c, "stats", keylimit.PerHour(3), redislimit.WithTimeout(patient),
		keylimit.WithClock(clock.NewMock()), redislimit.WithPrefix(testKey(t, "p")+":"))
	require.NoError(t, err)
	require.Equal(t, keylimit.Stats{Decisions: true, Remote: true}, lim.Stats(), "a new limiter's")

	require.True(t, lim.AllowN("k", 3)) // a call, admitted
	for range 5 {                       // a call, then 4 deny-cache hits, all refused
		require.False(t, lim.Allow("k"))
	}
	require.False(t, lim.Peek("k").Allowed) // a deny-cache hit, not a request
	require.False(t, lim.AllowN("k", 4))    // impossible: refused, no call
	lim.Reset("k")                          // a call
	require.True(t, lim.Allow("k"))         // a call, admitted
	require.Equal(t, keylimit.Stats{Decisions: true, Remote: true, Admitted: 2, Refused: 6, Calls: 4, CacheHits: 5}, lim.Stats(), "with Redis up")

	f.on.Store(true)
	require.True(t, lim.Allow("k")) // a call that fails: the fallback admits
	require.True(t, lim.Allow("k")) // within the backoff: the fallback, no call
	lim.Peek("k")                   // the same
	require.Equal(t, keylimit.Stats{Decisions: true, Remote: true, Admitted: 4, Refused: 6, Calls: 5, Errors: 1, Fallbacks: 3, CacheHits: 5}, lim.Stats(),
		"after a failure")
}
