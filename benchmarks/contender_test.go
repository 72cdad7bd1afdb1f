package benchmarks

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/stretchr/testify/require"
)

// countAllowed builds c for q and returns how many of n calls on one key it
// admits, from one goroutine, none of them failing with an error.
func countAllowed(t *testing.T, c Contender, q Quota, n int) int {
	t.Helper()
	lim, err := c.New(q)
	require.NoError(t, err, c.Name)
	defer func() { require.NoError(t, Close(lim), "%s: Close", c.Name) }()
	allowed := 0
	for range n {
		if lim.Allow("0123456789abcdef") {
			allowed++
		}
	}
	if e, ok := lim.(Errors); ok {
		require.Zero(t, e.Errors(), "%s: errors from one goroutine", c.Name)
	}
	return allowed
}

// TestContendersKeepTheirQuota checks that every contender is built from a
// Quota the way the tables assume, one goroutine at a time: the loose limit
// admits everything, the tight one exactly one event, and the hot-key quota
// exactly its burst. A wrapper that mistranslated a quota (throttled's burst
// is MaxBurst+1, juju takes a rate) would fail here.
func TestContendersKeepTheirQuota(t *testing.T) {
	const n = 1000
	loose := Quota{Burst: hotpath.Loose.Events, Period: hotpath.Loose.Period}
	tight := Quota{Burst: hotpath.Tight.Events, Period: hotpath.Tight.Period}
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			require.Equal(t, n, countAllowed(t, c, loose, n), "loose limit: calls admitted of %d", n)
			require.Equal(t, 1, countAllowed(t, c, tight, n), "tight limit: calls admitted of %d", n)
			require.Equal(t, HotKeyQuota.Burst, countAllowed(t, c, HotKeyQuota, n), "hot-key quota: calls admitted of %d", n)
		})
	}
}

// TestContendersKeepKeysApart checks that each contender limits keys
// separately: spending one key's quota leaves another's whole.
func TestContendersKeepKeysApart(t *testing.T) {
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			lim, err := c.New(Quota{Burst: 1, Period: time.Hour})
			require.NoError(t, err)
			defer Close(lim)
			keys := hotpath.Keys(100)
			for _, k := range keys {
				require.True(t, lim.Allow(k), "first call on key %q", k)
			}
			for _, k := range keys {
				require.False(t, lim.Allow(k), "second call on key %q", k)
			}
		})
	}
}
