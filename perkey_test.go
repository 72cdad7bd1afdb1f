package keylimit_test

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestSetLimitKeepsDebtInTokens(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(10), keylimit.WithClock(clk))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("k", 10)) // owes 10 tokens: 10 s

	// Raised: the 10 tokens owed are 10 × 100 ms now, of a burst of 20.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(10).WithBurst(20)))
	require.Equal(t, keylimit.PerSecond(10).WithBurst(20), lim.Limit())
	r := lim.Peek("k")
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 20, Remaining: 10, ResetAfter: time.Second}, r)
	require.True(t, lim.AllowN("k", 10))
	require.False(t, lim.Allow("k"))
	require.Equal(t, 20, lim.Peek("new").Remaining, "a new key gets the new burst")

	// Lowered: 20 tokens owed at 1 s each, beyond the new burst of 3: the
	// key waits for 18 of them before its next event.
	require.NoError(t, lim.SetLimit(keylimit.PerSecond(1).WithBurst(3)))
	r = lim.Take("k", 1)
	require.Equal(t, keylimit.Result{Limit: 3, RetryAfter: 18 * time.Second, ResetAfter: 20 * time.Second}, r)
	clk.Add(18*time.Second - time.Nanosecond)
	require.False(t, lim.Allow("k"))
	clk.Add(time.Nanosecond)
	require.True(t, lim.Allow("k"))
}

func TestSetLimitInvalidChangesNothing(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(newFastClock()))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("k", 2))
	require.EqualError(t, lim.SetLimit(keylimit.PerMinute(0)), "keylimit: events 0 is below 1")
	require.Equal(t, keylimit.PerMinute(5), lim.Limit())
	require.Equal(t, 3, lim.Peek("k").Remaining)
}

// TestSetLimitUnderConcurrentAllow: goroutines hammer one key on a moving
// clock while the limit flips between two. Admissions never exceed the
// larger burst plus the larger rate over any interval, and -race finds no
// race.
func TestSetLimitUnderConcurrentAllow(t *testing.T) {
	a, b := keylimit.PerSecond(10).WithBurst(5), keylimit.PerSecond(2).WithBurst(20)
	maxBurst, minInterval := 20, a.Interval()
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](a, keylimit.WithClock(clk))
	require.NoError(t, err)
	defer lim.Close()
	type admission struct{ before, after time.Time }
	var (
		mu    sync.Mutex
		adms  []admission
		wg    sync.WaitGroup
		flips atomic.Int64
	)
	t0 := clk.Now()
	end := t0.Add(30 * time.Second)
	for range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if i%50 == 0 {
					// Move the clock and flip the limit.
					clk.Add(time.Millisecond)
					l := a
					if flips.Add(1)%2 == 0 {
						l = b
					}
					if err := lim.SetLimit(l); err != nil {
						t.Error(err)
						return
					}
				}
				before := clk.Now()
				if before.After(end) {
					return
				}
				ok := lim.Allow("hot")
				if ok {
					mu.Lock()
					adms = append(adms, admission{before, clk.Now()})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Greater(t, flips.Load(), int64(10_000), "the limit flipped often")
	bound := func(d time.Duration) int { return maxBurst + int(d/minInterval) }
	require.LessOrEqual(t, len(adms), bound(clk.Now().Sub(t0)))
	sort.Slice(adms, func(i, j int) bool { return adms[i].before.Before(adms[j].before) })
	for i := range adms {
		for j := i; j < len(adms); j++ {
			count := 0
			for k := i; k <= j; k++ {
				if !adms[k].after.After(adms[j].after) {
					count++
				}
			}
			if d := adms[j].after.Sub(adms[i].before); count > bound(d) {
				t.Fatalf("%d admissions in %v, bound %d", count, d, bound(d))
			}
		}
	}
	t.Logf("%d admissions over %v, %d flips", len(adms), clk.Now().Sub(t0), flips.Load())
}

// tier is a per-key limit function: clients 1 and 2 on two endpoints.
func tier(foo bool) func(client string) keylimit.Limit {
	return func(client string) keylimit.Limit {
		switch {
		case client == "client-1" && foo:
			return keylimit.PerMinute(10)
		case client == "client-1":
			return keylimit.PerMinute(5)
		case client == "client-2" && foo:
			return keylimit.PerMinute(20)
		case client == "client-2":
			return keylimit.PerMinute(10)
		}
		return keylimit.Limit{} // everyone else: the limiter's own limit
	}
}

func TestKeyLimitTiers(t *testing.T) {
	clk := newFastClock()
	endpoints := map[string]*keylimit.TokenBucket[string]{}
	for name, foo := range map[string]bool{"/foo": true, "/bar": false} {
		lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(clk), keylimit.WithKeyLimit(tier(foo)))
		require.NoError(t, err)
		defer lim.Close()
		endpoints[name] = lim
	}
	want := map[string]map[string]int{
		"/foo": {"client-1": 10, "client-2": 20, "anonymous": 2},
		"/bar": {"client-1": 5, "client-2": 10, "anonymous": 2},
	}
	for ep, clients := range want {
		for client, quota := range clients {
			got := 0
			for range 50 {
				if endpoints[ep].Allow(client) {
					got++
				}
			}
			require.Equal(t, quota, got, "%s on %s", client, ep)
			require.Equal(t, quota, endpoints[ep].Peek(client).Limit)
		}
	}
	// A minute later each has its quota again.
	clk.Add(time.Minute)
	require.True(t, endpoints["/foo"].AllowN("client-2", 20))
	require.False(t, endpoints["/foo"].Allow("client-2"))
}

func TestKeyLimitInvalidIsAnErrorNotAPanic(t *testing.T) {
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(clk),
		keylimit.WithKeyLimit(func(key string) keylimit.Limit {
			if key == "bad" {
				return keylimit.PerMinute(-1)
			}
			return keylimit.Limit{}
		}))
	require.NoError(t, err)
	defer lim.Close()
	r := lim.Take("bad", 1)
	require.False(t, r.Allowed)
	require.EqualError(t, r.Err, "keylimit: the limit WithKeyLimit gave this key is invalid: keylimit: events -1 is below 1")
	require.Equal(t, keylimit.InfDuration, r.RetryAfter)
	require.False(t, lim.Allow("bad"))
	require.ErrorIs(t, lim.Wait(context.Background(), "bad"), r.Err)
	require.Equal(t, r.Err, lim.Peek("bad").Err)
	require.Equal(t, 0, lim.Len(), "a key with an invalid limit is not tracked")
	require.True(t, lim.AllowN("good", 5))
	require.Nil(t, lim.Take("good", 1).Err)
}

func TestKeyLimitWrongKeyType(t *testing.T) {
	_, err := keylimit.NewTokenBucket[int](keylimit.PerMinute(5), keylimit.WithKeyLimit(func(string) keylimit.Limit { return keylimit.Limit{} }))
	require.EqualError(t, err, "keylimit: WithKeyLimit got a func(string) keylimit.Limit, but the limiter's keys are int")
	_, err = keylimit.NewTokenBucket[int](keylimit.PerMinute(5), keylimit.WithKeyLimit[int](nil))
	require.EqualError(t, err, "keylimit: WithKeyLimit(nil)")
}

func TestSetLimitReresolvesKeyLimits(t *testing.T) {
	var premium atomic.Int64
	premium.Store(10)
	clk := newFastClock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(clk),
		keylimit.WithKeyLimit(func(key string) keylimit.Limit {
			if key == "premium" {
				return keylimit.PerHour(int(premium.Load()))
			}
			return keylimit.Limit{}
		}))
	require.NoError(t, err)
	defer lim.Close()
	require.True(t, lim.AllowN("premium", 10))
	require.False(t, lim.Allow("premium"))
	premium.Store(30) // an operator raises the tier...
	require.False(t, lim.Allow("premium"), "...which keys pick up at SetLimit, not before")
	require.NoError(t, lim.SetLimit(keylimit.PerHour(1)))
	r := lim.Peek("premium")
	require.Equal(t, 30, r.Limit)
	require.Equal(t, 20, r.Remaining, "the 10 owed are still owed")
}

func TestKeyLimitAllocs(t *testing.T) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1_000_000), keylimit.WithKeyLimit(tier(true)))
	require.NoError(t, err)
	defer lim.Close()
	lim.Allow("client-1")
	require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("client-1") }))
}
