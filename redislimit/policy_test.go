package redislimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// The limit each key is under: SetKeyLimit, and SetLimit, on Redis, held
// to what the in-memory limiters do. The behaviour suite's
// SetLimitKeepsWhatWasUsed runs on them too (TestBehaviour).

// tier is the seed scenario's per-key limit function: clients 1 and 2 on
// two endpoints; everyone else gets the limiter's own limit. The same
// function serves keylimit's SetKeyLimit and redislimit's.
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
		return keylimit.Limit{}
	}
}

// TestKeyLimitTiers: one limiter per endpoint, tiers by key, as in memory;
// each client gets exactly its quota on each endpoint, with its own Limit,
// and after a minute of the test's clock its quota again.
func TestKeyLimitTiers(t *testing.T) {
	c := shared.client(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := newMock()
			endpoint := func(foo bool) keylimit.Limiter[string] {
				lim, err := typ.new(c, keylimit.PerMinute(2), redislimit.WithPrefix(testKey(t, "endpoint")+":"),
					redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
				require.NoError(t, err)
				return keyLimited(t, lim, tier(foo))
			}
			endpoints := map[string]keylimit.Limiter[string]{"/foo": endpoint(true), "/bar": endpoint(false)}
			want := map[string]map[string]int{
				"/foo": {"client-1": 10, "client-2": 20, "anonymous": 2},
				"/bar": {"client-1": 5, "client-2": 10, "anonymous": 2},
			}
			for round := range 2 {
				for ep, clients := range want {
					for client, quota := range clients {
						got := 0
						for range 25 {
							if endpoints[ep].Allow(client) {
								got++
							}
						}
						require.Equal(t, quota, got, "round %d: %s on %s", round, client, ep)
						r := endpoints[ep].Peek(client)
						require.Equal(t, quota, r.Limit, "round %d: %s on %s: Limit", round, client, ep)
						require.Zero(t, r.Remaining, "round %d: %s on %s: Remaining", round, client, ep)
					}
				}
				mock.Add(time.Minute)
			}
		})
	}
}

// TestKeyLimitInvalidIsAnErrorNotAPanic: a key whose limit is invalid is
// refused, without a round trip, with Result.Err saying why; the other keys
// are unaffected.
func TestKeyLimitInvalidIsAnErrorNotAPanic(t *testing.T) {
	s := newServer(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(s.client(t), keylimit.PerMinute(5), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			keyLimited(t, lim, func(key string) keylimit.Limit {
				if key == "broken" {
					return keylimit.Per(0, time.Minute)
				}
				return keylimit.Limit{}
			})
			pinged(t, lim)
			before := s.commandStats(t)
			for _, r := range []keylimit.Result{lim.Take("broken", 1), lim.Peek("broken")} {
				require.False(t, r.Allowed, "%v", r)
				require.Equal(t, keylimit.InfDuration, r.RetryAfter)
				require.ErrorContains(t, r.Err, "keylimit: the per-key limit function gave this key an invalid limit: keylimit: events 0 is below 1")
			}
			require.Empty(t, s.sentSince(t, before), "the broken key's requests went to Redis")
			require.True(t, lim.AllowN(testKey(t, "fine"), 5), "another key")
		})
	}
}

// TestSetLimitSideBySideWithMemory: a random sequence of Take, Peek,
// SetLimit and clock steps, run on a Redis limiter and on the in-memory
// limiter of the same type, both on one mock clock (the scripts' time too):
// the same Results, to the nanosecond. It holds the scripts' conversions (a
// bucket's debt in tokens, a fixed window's count carried to a window of
// another period) to keylimit's. (A SlidingWindow keeps its log in memory
// in a ring of Events entries, and forgets across a change entries Redis
// keeps: the suite holds both to the same bounds.)
func TestSetLimitSideBySideWithMemory(t *testing.T) {
	c := shared.client(t)
	limits := []keylimit.Limit{
		keylimit.PerMinute(10), keylimit.PerMinute(3).WithBurst(5), keylimit.PerHour(100),
		keylimit.Per(7, 90*time.Second), keylimit.PerSecond(2), keylimit.PerSecond(3),
	}
	memory := map[string]func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error){
		"TokenBucket": func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](l, opts...)
		},
		"FixedWindow": func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewFixedWindow[string](l, opts...)
		},
	}
	type setter interface {
		keylimit.Limiter[string]
		SetLimit(keylimit.Limit) error
	}
	for name, newMemory := range memory {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(4) {
				mock := newMock()
				rl, err := typeNamed(name)(c, limits[0], redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0),
					keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
				require.NoError(t, err)
				ml, err := newMemory(limits[0], keylimit.WithClock(mock))
				require.NoError(t, err)
				rlim, mlim := rl.(setter), ml.(setter)
				key, cur := testKey(t, "k"), limits[0]
				rng := rand.New(rand.NewPCG(seed, 15))
				for step := range 300 {
					var got, want keylimit.Result
					switch op := rng.IntN(12); {
					case op == 0:
						cur = limits[rng.IntN(len(limits))]
						require.NoError(t, rlim.SetLimit(cur))
						require.NoError(t, mlim.SetLimit(cur))
						continue
					case op <= 3:
						mock.Add(time.Duration(rng.IntN(40_000)) * time.Millisecond)
						continue
					case op == 4:
						got, want = rlim.Peek(key), mlim.Peek(key)
					default:
						// Only requests that can pass: one that never
						// does is answered without a round trip, which
						// converts nothing (the in-memory limiter does).
						n := 1 + rng.IntN(min(4, quota(name, cur)))
						got, want = rlim.Take(key, n), mlim.Take(key, n)
					}
					require.Equal(t, want, got, "seed %d, step %d: Redis, memory", seed, step)
				}
				require.NoError(t, ml.(interface{ Close() error }).Close())
			}
		})
	}
}

// quota is the most events a limiter of the type named takes at once under
// l.
func quota(name string, l keylimit.Limit) int {
	if name == "TokenBucket" {
		return l.BurstSize()
	}
	return l.Events
}

// TestSetLimitAcrossInstances: two instances share the keys' state, not
// their limits. One lowers its limit; the key keeps what it used on both,
// each judging it by its own limit; neither instance's change creates
// capacity on the other.
func TestSetLimitAcrossInstances(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := newMock()
			prefix := redislimit.WithPrefix(testKey(t, "shared") + ":")
			newInstance := func() keylimit.Limiter[string] {
				lim, err := typ.new(shared.client(t), keylimit.PerHour(10), prefix, redislimit.WithTimeout(patient),
					keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
				require.NoError(t, err)
				return lim
			}
			a, b := newInstance(), newInstance()
			key := testKey(t, "k")
			require.True(t, a.AllowN(key, 6), "AllowN(6) of 10 on a")
			require.NoError(t, a.(interface{ SetLimit(keylimit.Limit) error }).SetLimit(keylimit.PerHour(5)))
			ra, rb := a.Peek(key), b.Peek(key)
			require.Equal(t, 5, ra.Limit, "a's Limit after lowering it")
			require.False(t, ra.Allowed, "a with 6 used of 5: %v", ra)
			require.Equal(t, 10, rb.Limit, "b keeps its limit")
			require.Equal(t, 4, rb.Remaining, "b: 6 used of 10")
			require.True(t, b.AllowN(key, 4), "b takes its last 4")
			require.False(t, b.Allow(key), "b with 10 of 10 used")
			require.False(t, a.Allow(key), "a with 10 used of 5")
		})
	}
}

// TestSetLimitErrors: an invalid limit is an error that changes nothing;
// the constructor's checks hold for SetLimit too.
func TestSetLimitErrors(t *testing.T) {
	c := shared.client(t)
	for _, typ := range types {
		lim, err := typ.new(c, keylimit.PerHour(10))
		require.NoError(t, err)
		setter := lim.(interface {
			SetLimit(keylimit.Limit) error
			Limit() keylimit.Limit
		})
		require.EqualError(t, setter.SetLimit(keylimit.Per(5, 0)), "keylimit: period 0s is not positive", typ.name)
		require.Equal(t, keylimit.PerHour(10), setter.Limit(), typ.name)
	}
	b, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(10))
	require.NoError(t, err)
	require.ErrorContains(t, b.SetLimit(keylimit.Per(1, 60*24*time.Hour)), "spans more than")
	w, err := redislimit.NewFixedWindow(c, "test", keylimit.PerHour(10))
	require.NoError(t, err)
	require.ErrorContains(t, w.SetLimit(keylimit.Per(1, 1500*time.Nanosecond)), "not a whole number of microseconds")
	_, err = b.TakeContext(context.Background(), testKey(t, "k"), 1)
	require.NoError(t, err)
}

// TestSetKeyLimit: SetKeyLimit moves keys to their own limits and back, on
// every Redis type beside the in-memory type of the same algorithm, with
// exact counts: a key keeps what it used, so raising its limit admits the
// difference and lowering it admits nothing more.
func TestSetKeyLimit(t *testing.T) {
	c := shared.client(t)
	memory := map[string]func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error){
		"TokenBucket": func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](l, opts...)
		},
		"FixedWindow": func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewFixedWindow[string](l, opts...)
		},
		"SlidingWindow": func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingWindow[string](l, opts...)
		},
	}
	type keySetter interface {
		keylimit.Limiter[string]
		SetKeyLimit(func(key string) keylimit.Limit) error
		LimitOf(key string) keylimit.Limit
	}
	for name, newMemory := range memory {
		t.Run(name, func(t *testing.T) {
			mock := newMock()
			rl, err := typeNamed(name)(c, keylimit.PerMinute(5), redislimit.WithTimeout(patient),
				keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
			require.NoError(t, err)
			ml, err := newMemory(keylimit.PerMinute(5), keylimit.WithClock(mock))
			require.NoError(t, err)
			vip, basic := testKey(t, "vip"), testKey(t, "basic")
			admitted := func(lim keylimit.Limiter[string], key string) int {
				n := 0
				for range 20 {
					if lim.Allow(key) {
						n++
					}
				}
				return n
			}
			for i, lim := range []keySetter{rl.(keySetter), ml.(keySetter)} {
				where := [...]string{"Redis", "memory"}[i]
				require.Equal(t, 5, admitted(lim, vip), "%s: vip under the limiter's 5/min", where)
				require.NoError(t, lim.SetKeyLimit(func(key string) keylimit.Limit {
					if key == vip {
						return keylimit.PerMinute(12)
					}
					return keylimit.Limit{}
				}))
				require.Equal(t, keylimit.PerMinute(12), lim.LimitOf(vip), where)
				require.Equal(t, 7, admitted(lim, vip), "%s: vip raised to 12/min, 5 used", where)
				require.Equal(t, 5, admitted(lim, basic), "%s: basic still under 5/min", where)
				require.NoError(t, lim.SetKeyLimit(nil))
				require.Equal(t, keylimit.PerMinute(5), lim.LimitOf(vip), where)
				require.Zero(t, admitted(lim, vip), "%s: vip back under 5/min, 12 used", where)
			}
		})
	}
}
