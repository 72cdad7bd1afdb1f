package redislimit

import (
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestFleetAnnouncementSchedule: the first call Redis answers announces the
// instance; the next is due a period later if the size read did not change,
// fleetSoon later if it did (a fleet starting or scaling) or if the
// announcement failed; calls before it is due announce nothing, and after
// close nothing is announced at all.
func TestFleetAnnouncementSchedule(t *testing.T) {
	c := serverOfItsOwn(t)
	prefix := "schedule:"
	var sizes []int
	a := newFleet(c, prefix, time.Second, nil, func(n int) { sizes = append(sizes, n) })
	b := newFleet(c, prefix, time.Second, nil, nil)
	require.Equal(t, int64(math.MinInt64), a.next.Load())

	const t0 = int64(5 * time.Second)
	b.answered(t0)
	b.wg.Wait()
	require.Equal(t, t0+int64(fleetPeriod), b.next.Load(), "after an announcement that read 1, as known: a period")
	a.answered(t0)
	a.wg.Wait()
	require.Equal(t, t0+int64(fleetSoon), a.next.Load(), "after an announcement that read a new size (2): soon")
	require.Equal(t, []int{2}, sizes)
	a.answered(t0 + int64(fleetSoon) - 1)
	a.wg.Wait()
	require.Equal(t, t0+int64(fleetSoon), a.next.Load(), "a call before it is due announces nothing")
	a.answered(t0 + int64(fleetSoon))
	a.wg.Wait()
	require.Equal(t, t0+int64(fleetSoon)+int64(fleetPeriod), a.next.Load(), "after one that read 2 again: a period")

	// An announcement that fails (the client closed) changes no size, and
	// the next is due soon.
	dead := redis.NewClient(&redis.Options{Addr: c.Options().Addr, ContextTimeoutEnabled: true})
	dead.Close()
	d := newFleet(dead, prefix, time.Second, nil, nil)
	d.size.Store(7)
	d.answered(t0)
	d.wg.Wait()
	require.Equal(t, t0+int64(fleetSoon), d.next.Load(), "after a failed announcement: soon")
	require.Equal(t, 7, d.instances(), "the size after a failed announcement")

	a.close()
	n, err := c.ZCard(t.Context(), prefix+"#fleet").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "instances announced once one closed")
	next := a.next.Load()
	a.answered(next + int64(time.Hour))
	a.wg.Wait()
	require.Equal(t, next+int64(time.Hour)+int64(fleetPeriod), a.next.Load()) // the CAS ran ...
	n, err = c.ZCard(t.Context(), prefix+"#fleet").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "... and announced nothing after close")
}
