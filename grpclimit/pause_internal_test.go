package grpclimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The pauses a Client keeps are bounded: past maxPauses, the one that ends
// first is dropped; pauses that have ended are swept; an answer that
// arrives late never shortens a pause.
func TestPausesAreBounded(t *testing.T) {
	var c Client
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = maxPauses + 100
	for i := range n {
		c.pause(strconv.Itoa(i), now.Add(time.Duration(i+1)*time.Second), now)
	}
	require.Equal(t, maxPauses, len(c.paused), "pauses kept")
	require.True(t, c.pausedUntil("0", now).IsZero(), "the pause that ends first was dropped")
	require.True(t, c.pausedUntil(strconv.Itoa(n-maxPauses-1), now).IsZero(), "and every one ending before the kept")
	require.Equal(t, now.Add(n*time.Second), c.pausedUntil(strconv.Itoa(n-1), now), "the last is kept")

	late := now.Add(2 * n * time.Second)
	c.pause("new", now.Add(time.Second), late)
	require.Equal(t, 1, len(c.paused), "pauses kept: the ended ones were swept")

	var d Client
	for i := range sweepAbove {
		d.pause(strconv.Itoa(i), now.Add(time.Second), now)
	}
	d.pause("new", now.Add(3*time.Second), now.Add(2*time.Second))
	require.Equal(t, 1, len(d.paused), "pauses kept: a sweep at sweepAbove")

	c.pause("new", now.Add(10*time.Second), now)
	c.pause("new", now.Add(5*time.Second), now)
	require.Equal(t, now.Add(10*time.Second), c.pausedUntil("new", now), "a shorter pause arriving late")
	require.True(t, c.pausedUntil("new", now.Add(10*time.Second)).IsZero(), "a pause has ended at its end")
	require.Equal(t, 0, len(c.paused), "an ended pause is deleted when read")
}
