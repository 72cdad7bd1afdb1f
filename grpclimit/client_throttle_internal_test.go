package grpclimit

import (
	"strconv"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/throttle"
	"github.com/stretchr/testify/require"
)

// Throttle's counts are bounded as the pauses are: failed calls under
// twice maxPauses keys leave at most maxPauses keys counted.
func TestClientThrottleKeysAreBounded(t *testing.T) {
	c := &Client{Throttle: 2, Clock: clock.NewMock()}
	for i := range 2 * maxPauses {
		key := strconv.Itoa(i)
		counted, err := c.admit(key)
		require.NoError(t, err)
		require.True(t, counted)
		c.record(key, counted, throttle.Failed)
		n, _, _ := c.throttle.Len()
		require.LessOrEqual(t, n, maxPauses)
	}
	n, dropped, _ := c.throttle.Len()
	require.Equal(t, uint64(2*maxPauses-n), dropped, "every key is counted or was dropped")
}
