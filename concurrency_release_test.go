package keylimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// TestConcurrencyDoubleReleaseWithAWaiter pins issue 37.2: two Releases of
// one Permit race while an Acquire waits, as httplimit.Transport's do when
// a body is closed as its context ends. The losing Release read the hold
// record that the winning one had handed to the waiter (a data race under
// -race). Each round holds both slots, queues a waiter, and releases the
// first permit from two goroutines at once: exactly one slot goes to the
// waiter, and the second Release frees nothing.
func TestConcurrencyDoubleReleaseWithAWaiter(t *testing.T) {
	c := newConcurrency(t, 2, keylimit.WithStats())
	const key = "k"
	for round := range sized(300, 3000) {
		first, r := c.TryAcquire(key, 1) // the key's own record: its first holder
		require.True(t, r.Allowed, "round %d", round)
		second, r := c.TryAcquire(key, 1)
		require.True(t, r.Allowed, "round %d", round)
		got := make(chan keylimit.Permit)
		go func() {
			p, err := c.Acquire(context.Background(), key, 1)
			if err != nil {
				panic(err)
			}
			got <- p
		}()
		waitFor(t, "the Acquire to queue", func() bool { return c.Stats().Waiting == 1 })
		var wg sync.WaitGroup
		wg.Go(first.Release)
		wg.Go(first.Release)
		third := <-got
		wg.Wait()
		first.Release() // a third, after both: still nothing
		require.Equal(t, 0, c.Peek(key).Remaining, "round %d: the second and the waiter's hold both slots", round)
		_, r = c.TryAcquire(key, 1)
		require.False(t, r.Allowed, "round %d: no slot was freed twice", round)
		second.Release()
		require.Equal(t, 1, c.Peek(key).Remaining, "round %d", round)
		third.Release()
		third.Release()
		require.Equal(t, 2, c.Peek(key).Remaining, "round %d", round)
	}
}

// TestConcurrencyDoubleReleaseHammer: 32 goroutines acquire one of 3 slots
// of a key, mostly waiting in its queue, and release each permit from two
// goroutines at once. The holders are counted exactly: never more than 3
// at once, and all 3 slots free at the end.
func TestConcurrencyDoubleReleaseHammer(t *testing.T) {
	const slots = 3
	c := newConcurrency(t, slots)
	var (
		held, most, acquired atomic.Int64
		wg                   sync.WaitGroup
	)
	rounds := sized(300, 3000)
	for range 32 {
		wg.Go(func() {
			for range rounds {
				p, err := c.Acquire(context.Background(), "k", 1)
				if err != nil {
					panic(err)
				}
				acquired.Add(1)
				now := held.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				held.Add(-1) // before the Release: never below what the limiter holds
				var both sync.WaitGroup
				both.Go(p.Release)
				p.Release()
				both.Wait()
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(32*rounds), acquired.Load())
	require.LessOrEqual(t, most.Load(), int64(slots), "holders at once")
	require.Equal(t, slots, c.Peek("k").Remaining, fmt.Sprintf("after %d double Releases", acquired.Load()))
}
