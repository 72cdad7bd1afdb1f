package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestDenyCacheSendsNothingWhileDenied: once Redis refuses a key, a flood
// of requests for it (same n or more) is answered in process: INFO
// commandstats counts zero commands over the flood, and each denied call
// allocates nothing. Once the refusal's RetryAfter has passed on the local
// clock, the next call asks Redis again (exactly one command).
func TestDenyCacheSendsNothingWhileDenied(t *testing.T) {
	s := newServer(t) // its own server: commandstats counts only this test
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := clock.NewMock()
			lim, err := typ.new(s.client(t), keylimit.PerHour(5),
				redislimit.WithTimeout(patient), keylimit.WithClock(mock))
			require.NoError(t, err)
			pinged(t, lim)
			key := testKey(t, "flooded")
			require.True(t, lim.AllowN(key, 5), "AllowN(5) on a new key")
			refusal := lim.Take(key, 1) // Redis refuses: now remembered
			require.False(t, refusal.Allowed, "Take after the quota: %+v", refusal)
			require.Positive(t, refusal.RetryAfter, "Take after the quota: %+v", refusal)
			require.Positive(t, refusal.RefillAfter, "Take after the quota: %+v", refusal)

			before := s.commands(t)
			const flood = 10_000
			for i := range flood {
				r := lim.Take(key, 1+i%5)
				require.Equal(t, keylimit.Result{Limit: 5, RetryAfter: refusal.RetryAfter, ResetAfter: refusal.ResetAfter, RefillAfter: refusal.RefillAfter}, r,
					"flood call %d: the remembered refusal", i)
			}
			require.False(t, lim.Allow(key), "Allow on a denied key")
			require.False(t, lim.Peek(key).Allowed, "Peek on a denied key")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow(key) }), "allocations of a denied Allow")
			require.Zero(t, s.commands(t)-before, "commands sent to Redis by the flood on a denied key")

			// Local time passes: the remembered RetryAfter shrinks with it.
			mock.Add(time.Second)
			require.Equal(t, refusal.RetryAfter-time.Second, lim.Take(key, 1).RetryAfter, "RetryAfter a second later")
			// Once it has passed, Redis is asked again, once per call.
			mock.Add(refusal.RetryAfter)
			stats := s.commandStats(t)
			lim.Take(key, 1)
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, stats), "what a call after RetryAfter sent")
		})
	}
}

// TestDenyCacheAsksForSmallerRequests: a refusal of n events says nothing
// of fewer events, so those still go to Redis, and pass if they fit.
func TestDenyCacheAsksForSmallerRequests(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(shared.client(t), keylimit.PerHour(5), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			key := testKey(t, "k")
			lim.AllowN(key, 3)
			require.False(t, lim.AllowN(key, 3), "AllowN(3) with 2 left")
			require.True(t, lim.AllowN(key, 2), "AllowN(2) with 2 left, after a refused AllowN(3)")
		})
	}
}

// TestResetAndRefundClearTheDenyCache: Reset and Refund on this instance give
// capacity back, so its remembered refusal must go at once.
func TestResetAndRefundClearTheDenyCache(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(shared.client(t), keylimit.PerHour(3), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			refunder := lim.(keylimit.Refunder[string])
			key := testKey(t, "k")
			lim.AllowN(key, 2)
			_, last := refunder.Admit(key, 1)
			require.False(t, lim.Allow(key), "Allow after the quota")
			refunder.Refund(key, last)
			require.True(t, lim.Allow(key), "Allow after Refund(1)")
			require.False(t, lim.Allow(key), "a second Allow after Refund(1)")
			lim.Reset(key)
			require.True(t, lim.AllowN(key, 3), "AllowN(3) after Reset")
		})
	}
}

// TestDenyCacheIsBounded: a cache of 2 keys remembers the last two refused
// keys; refusing a third forgets the oldest, which goes to Redis once and is
// remembered again (forgetting the next oldest).
func TestDenyCacheIsBounded(t *testing.T) {
	s := newServer(t)
	mock := clock.NewMock()
	lim, err := redislimit.NewTokenBucket(s.client(t), "test", keylimit.PerMinute(1),
		redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithDenyCacheSize(2))
	require.NoError(t, err)
	pinged(t, lim)
	refuse := func(key string) {
		t.Helper()
		lim.Allow(key)
		require.False(t, lim.Allow(key), "the second call on %s", key)
	}
	callsFor := func(key string) int64 {
		t.Helper()
		before := s.commandStats(t)
		for range 10 {
			require.False(t, lim.Allow(key), "Allow on %s", key)
		}
		return s.sentSince(t, before)["evalsha"]
	}
	refuse("a")
	refuse("b")
	refuse("c") // forgets a
	require.Zero(t, callsFor("b")+callsFor("c"), "script calls of the 10 refusals of b and of c, remembered")
	require.Equal(t, int64(1), callsFor("a"), "script calls of 10 refusals of a, forgotten: once, then remembered")
	require.Equal(t, int64(1), callsFor("b"), "script calls of 10 refusals of b, forgotten for a")
	require.Zero(t, callsFor("a"), "script calls of a, remembered again")
}

// TestDenyCacheRemembersOnlyRedis: the deny cache stands above the failure
// policy and remembers Redis's refusals only. A refusal FailClosed gives
// while Redis fails is not remembered, so the first call once Redis is back
// asks it (and is admitted); a refusal Redis gives is remembered, and the
// next call is answered from the cache.
func TestDenyCacheRemembersOnlyRedis(t *testing.T) {
	c := shared.client(t)
	f := addFaults(c)
	lim, err := redislimit.NewTokenBucket(c, "closed", keylimit.PerHour(1), redislimit.WithTimeout(patient),
		keylimit.WithClock(clock.NewMock()), redislimit.WithFailurePolicy(redislimit.FailClosed()),
		redislimit.WithFailureBackoff(0), redislimit.WithPrefix(testKey(t, "p")+":"))
	require.NoError(t, err)

	f.on.Store(true)
	r, err := lim.TakeContext(context.Background(), "k", 1)
	require.Error(t, err, "a take while Redis fails")
	require.False(t, r.Allowed, "FailClosed's answer while Redis fails: %+v", r)
	require.Positive(t, r.RetryAfter, "FailClosed's answer while Redis fails: %+v", r)

	f.on.Store(false)
	require.True(t, lim.Allow("k"), "the first call once Redis is back: asked, and admitted")
	require.False(t, lim.Allow("k"), "the next: Redis refuses")
	require.False(t, lim.Allow("k"), "and the next: the deny cache refuses")
	st := lim.Stats()
	require.Equal(t, uint64(3), st.Calls, "round trips: the failed one, and two to Redis once back")
	require.Equal(t, uint64(1), st.CacheHits, "refusals the deny cache answered: only Redis's")
}

// TestDenyCacheEndsOnRedisTime pins issue 37.7: a refusal was remembered
// on the local clock alone, so with a local clock (WithClock) that stands
// still while Redis's runs, the same refusal, with the same RetryAfter,
// was answered forever. It is remembered for the RetryAfter Redis said,
// counted on the local clock (which here stands still, so RetryAfter does
// too), and, when the scripts run on Redis's time, on the system's
// monotonic clock as well: once that much real time has passed, Redis is
// asked again, and admits.
func TestDenyCacheEndsOnRedisTime(t *testing.T) {
	s := newServer(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := newMock() // stands still
			lim, err := typ.new(s.client(t), keylimit.Per(1, time.Second),
				redislimit.WithTimeout(patient), keylimit.WithClock(mock))
			require.NoError(t, err)
			pinged(t, lim)
			var key string
			var refusal keylimit.Result
			for {
				key = testKey(t, "k")
				require.True(t, lim.Allow(key), "the first Allow")
				refusal = lim.Take(key, 1)
				require.False(t, refusal.Allowed, "%+v", refusal)
				require.Positive(t, refusal.RetryAfter, "%+v", refusal)
				require.LessOrEqual(t, refusal.RetryAfter, time.Second, "%+v", refusal)
				if refusal.RetryAfter >= 300*time.Millisecond {
					break
				}
				// A fixed window about to end: time enough for the check
				// below on the next.
				time.Sleep(refusal.RetryAfter)
			}

			sent := s.sentBy(t, func() {
				require.Equal(t, refusal.RetryAfter, lim.Take(key, 1).RetryAfter, "RetryAfter, on a local clock that stands still")
			})
			require.Empty(t, sent, "the refusal remembered")

			time.Sleep(refusal.RetryAfter + 10*time.Millisecond) // Redis's time passes, the mock's does not
			sent = s.sentBy(t, func() {
				require.True(t, lim.Allow(key), "Allow once Redis's refusal is over")
			})
			require.Equal(t, map[string]int64{"evalsha": 1}, sent, "what the Allow sent")
		})
	}
}

// TestDenyCacheNeverOutlastsTheWindow: a FixedWindow's refusal on a count
// tells RetryAfter from the process's reckoning of Redis's clock, not from
// TIME. Over 2 s of 25 ms windows on Redis's own clock, no refusal the deny
// cache answers comes when Redis's clock, read before the call, is at or
// past the latest end of the window Redis last refused in.
func TestDenyCacheNeverOutlastsTheWindow(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	ctx := context.Background()
	const period = 25 * time.Millisecond
	lim, err := redislimit.NewFixedWindow(c, "deny", keylimit.Per(1, period), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	pinged(t, lim)
	key := testKey(t, "k")
	var refusedUntil time.Time // Redis last refused in a window that ends no later
	cached, refused := 0, 0
	for stop := time.Now().Add(2 * time.Second); time.Now().Before(stop); {
		before, err := c.Time(ctx).Result()
		require.NoError(t, err)
		hits := lim.Stats().CacheHits
		allowed := lim.Allow(key)
		fromCache := lim.Stats().CacheHits > hits
		after, err := c.Time(ctx).Result()
		require.NoError(t, err)
		switch {
		case !allowed && fromCache:
			cached++
			require.True(t, before.Before(refusedUntil), "refused in process with Redis's clock at %v, past the end of the window Redis refused in, %v",
				before, refusedUntil)
		case !allowed:
			refused++
			refusedUntil = after.Truncate(period).Add(period) // windows are multiples of the period since the epoch
		}
	}
	t.Logf("refused by Redis %d times, by the deny cache %d", refused, cached)
	require.Greater(t, refused, 20, "refusals Redis made")
	require.Greater(t, cached, 20, "refusals the deny cache answered")
}
