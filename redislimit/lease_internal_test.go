package redislimit

import (
	"context"
	"testing"

	"github.com/puzpuzpuz/xsync/v3"
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

// TestLeaseKeyForgottenIdleAfterItsWait: a key is forgotten ls.idle after
// its last fetch or the end of its wait, whichever is later, and the
// sweeper is due then: a key the share rule paces for longer than idle is
// not forgotten as its pace ends, which is when its instance asks again
// (it would be asked as a rare key: a plain take, then a lease).
func TestLeaseKeyForgottenIdleAfterItsWait(t *testing.T) {
	var c localClock
	c.init(nil)
	const idle, pace = 40, 100
	ls := &leases{clock: &c, idle: idle, m: xsync.NewMapOf[string, *leaseKey]()}
	e := &leaseKey{last: 10}
	ls.m.Store("k", e)
	e.wait.Store(&leaseWait{until: 10 + pace})
	at, mono := ls.due(e, 10)
	require.EqualValues(t, 10+pace+idle, at, "when the sweeper is due for a key waiting %d", pace)
	require.EqualValues(t, never, mono, "on the monotonic clock")
	for _, now := range []int64{10 + pace, 10 + pace + idle - 1} {
		_, _, retired := ls.sweepKey("k", e, now)
		require.False(t, retired, "forgotten at %d", now)
	}
	_, _, retired := ls.sweepKey("k", e, 10+pace+idle)
	require.True(t, retired, "forgotten idle after the wait's end")
	_, ok := ls.m.Load("k")
	require.False(t, ok, "the key is left in the map")

	// A key with no wait: idle after its last fetch.
	e = &leaseKey{last: 10}
	at, _ = ls.due(e, 10)
	require.EqualValues(t, 10+idle, at, "when the sweeper is due for a key with no wait")
}
