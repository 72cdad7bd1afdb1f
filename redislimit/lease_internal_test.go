package redislimit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeaseCeiling: a lease never holds more than it was granted, nor gives
// more back to Redis, however many events are refunded to it (issue 24.3:
// each Refund of one lease Admission added to the lease again). Refunds
// are once per Admission above it; this is what holds even so.
func TestLeaseCeiling(t *testing.T) {
	var c localClock
	c.init(nil)
	ls := &leases{clock: &c}
	p := &grant{owner: ls, k: &keyLimit{quota: 100, step: 10}, mark: 1000, until: maxLocal, granted: 5}
	p.left.Store(3)
	require.NoError(t, ls.refund(context.Background(), "k", p, 4))
	require.EqualValues(t, 5, p.left.Load(), "a lease of 5 holding 3, after a refund of 4")
	for _, want := range []struct{ mark, u int64 }{{1000, 4}, {960, 1}, {950, 0}} {
		mark, u := p.markFor(4)
		require.Equal(t, want.u, u, "events of a lease of 5 given back to Redis, 4 at a time")
		if u > 0 {
			require.Equal(t, want.mark, mark, "the mark they are given back from")
		}
	}
}
