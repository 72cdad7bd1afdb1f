package metrics_test

import (
	"sync/atomic"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// The helpers of the package's tests. Assertions: testify's require, on the
// test's goroutine only.

// fixedWindow returns a FixedWindow of quota events an hour on a mock clock
// at the epoch, with opts, closed when the test ends.
func fixedWindow(t *testing.T, quota int, opts ...keylimit.Option) (*keylimit.FixedWindow[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	opts = append([]keylimit.Option{keylimit.WithClock(mock), keylimit.WithEvictionInterval(0)}, opts...)
	lim, err := keylimit.NewFixedWindow[string](keylimit.PerHour(quota), opts...)
	require.NoError(t, err, "NewFixedWindow")
	t.Cleanup(func() { lim.Close() })
	return lim, mock
}

// allows makes the calls of Allow in calls, in order, and returns how many
// were admitted.
func allows(lim keylimit.Limiter[string], calls ...string) (admitted int) {
	for _, key := range calls {
		if lim.Allow(key) {
			admitted++
		}
	}
	return admitted
}

// fixedStats is a StatsReader that returns st and counts its calls.
type fixedStats struct {
	st    keylimit.Stats
	calls atomic.Int64
}

func (f *fixedStats) Stats() keylimit.Stats {
	f.calls.Add(1)
	return f.st
}
