package redislimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// liveFleet makes n limiters of newLim's type on one prefix, each on a
// client of its own with a faults hook, announcing themselves (the default
// policy, announcements on), on mock's time for the process and the
// scripts.
func liveFleet[L any](t *testing.T, n int, newLim func(c redis.UniversalClient, opts ...redislimit.Option) (L, error),
	opts ...redislimit.Option) ([]L, []*faults) {
	t.Helper()
	fleet, faults := make([]L, n), make([]*faults, n)
	for i := range fleet {
		c := shared.client(t)
		faults[i] = addFaults(c)
		lim, err := newLim(c, append([]redislimit.Option{redislimit.WithFleetBeats(true), redislimit.WithTimeout(patient)}, opts...)...)
		require.NoError(t, err)
		fleet[i] = lim
	}
	return fleet, faults
}

// TestFleetSizeSharesTheLimit (issue 39): ten instances of the default
// policy announce themselves; once each has read the fleet's size, a
// Redis that fails leaves each exactly a tenth of the limit, and the fleet
// the limit, not ten times it. Before any announcement an instance knows
// of none but itself (the whole limit, as FailLocal(1)); an instance that
// stops announcing drops out of the count after FleetTTL on Redis time;
// Close withdraws one at once; and the size known during the outage is the
// one of the last good answer.
func TestFleetSizeSharesTheLimit(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := newMock()
			prefix := redislimit.WithPrefix(testKey(t, "fleet") + ":")
			fleet, faults := liveFleet(t, 10, func(c redis.UniversalClient, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
				return typ.new(c, keylimit.PerMinute(100), append(opts, prefix, keylimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
			})
			for _, lim := range fleet {
				require.Equal(t, 1, redislimit.FleetSize(lim), "the size known before any announcement")
			}
			for i, lim := range fleet {
				require.Equal(t, i+1, redislimit.Announce(lim), "the size instance %d reads as it announces itself", i)
			}
			for _, lim := range fleet {
				require.Equal(t, 10, redislimit.Announce(lim), "the size read once all have announced themselves")
			}

			// Redis fails for every instance: each decides alone on 100/10.
			for _, f := range faults {
				f.on.Store(true)
			}
			total := 0
			for i, lim := range fleet {
				admitted := 0
				for range 30 {
					if lim.Allow("k") {
						admitted++
					}
				}
				require.Equal(t, 10, admitted, "instance %d: admitted while Redis fails", i)
				require.Equal(t, 10, redislimit.Announce(lim), "instance %d: the size known while Redis fails", i)
				total += admitted
			}
			require.Equal(t, 100, total, "the fleet admitted while Redis fails: the limit")

			// Redis answers again. Nine stop announcing; after FleetTTL the
			// one that goes on counts itself alone, and decides alone on the
			// whole limit at the next failure.
			for _, f := range faults {
				f.on.Store(false)
			}
			mock.Add(redislimit.FleetTTL)
			require.Equal(t, 1, redislimit.Announce(fleet[0]), "the size after FleetTTL without the others' announcements")
			faults[0].on.Store(true)
			admitted := 0
			for range 150 {
				if fleet[0].Allow("k2") {
					admitted++
				}
			}
			require.Equal(t, 100, admitted, "alone: admitted while Redis fails")
			faults[0].on.Store(false)

			// All announce again; one Closes, and is no longer counted.
			for _, lim := range fleet {
				redislimit.Announce(lim)
			}
			require.Equal(t, 10, redislimit.Announce(fleet[0]))
			require.NoError(t, fleet[9].(interface{ Close() error }).Close())
			require.Equal(t, 9, redislimit.Announce(fleet[0]), "the size after an instance closed")
		})
	}
}

// TestFleetSizeOverride: WithFleetSize(n) and an explicit FailLocal(k) fix
// the share, and announce nothing (no key is written), however many
// instances run.
func TestFleetSizeOverride(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redislimit.Option
		want int
	}{
		{"WithFleetSize(4)", redislimit.WithFleetSize(4), 25},
		{"FailLocal(1)", redislimit.WithFailurePolicy(redislimit.FailLocal(1)), 100},
		{"FailLocal(5)", redislimit.WithFailurePolicy(redislimit.FailLocal(5)), 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := newMock()
			p := testKey(t, "fleet") + ":"
			prefix := redislimit.WithPrefix(p)
			fleet, faults := liveFleet(t, 3, func(c redis.UniversalClient, opts ...redislimit.Option) (*redislimit.TokenBucket, error) {
				return redislimit.NewTokenBucket(c, "fleet", keylimit.PerMinute(100),
					append(opts, prefix, tc.opt, keylimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
			})
			for _, lim := range fleet {
				require.True(t, lim.Allow("up"), "a call Redis answers")
				require.Zero(t, redislimit.FleetSize(lim), "the size learned")
			}
			n, err := shared.client(t).Exists(context.Background(), p+"#fleet").Result()
			require.NoError(t, err)
			require.Zero(t, n, "the fleet key")
			for _, f := range faults {
				f.on.Store(true)
			}
			for i, lim := range fleet {
				admitted := 0
				for range 150 {
					if lim.Allow("k") {
						admitted++
					}
				}
				require.Equal(t, tc.want, admitted, "instance %d: admitted while Redis fails", i)
			}
		})
	}
}

// TestFleetSizeUnderKeyLimits: the fallback's share of each key's own limit
// (SetKeyLimit) follows the live fleet's size too.
func TestFleetSizeUnderKeyLimits(t *testing.T) {
	mock := newMock()
	prefix := redislimit.WithPrefix(testKey(t, "fleet") + ":")
	fleet, faults := liveFleet(t, 4, func(c redis.UniversalClient, opts ...redislimit.Option) (*redislimit.FixedWindow, error) {
		return redislimit.NewFixedWindow(c, "fleet", keylimit.PerMinute(10),
			append(opts, prefix, keylimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
	})
	for _, lim := range fleet {
		require.NoError(t, lim.SetKeyLimit(func(key string) keylimit.Limit {
			if key == "big" {
				return keylimit.PerMinute(80)
			}
			return keylimit.Limit{}
		}))
		redislimit.Announce(lim)
	}
	for _, lim := range fleet {
		require.Equal(t, 4, redislimit.Announce(lim))
	}
	for _, f := range faults {
		f.on.Store(true)
	}
	for i, lim := range fleet {
		for key, want := range map[string]int{"big": 20, "small": 2} {
			admitted := 0
			for range 100 {
				if lim.Allow(key) {
					admitted++
				}
			}
			require.Equal(t, want, admitted, "instance %d, key %q: admitted while Redis fails", i, key)
		}
	}
}

// TestFleetSizeConcurrency: a Concurrency's fallback holds N over the live
// fleet's size: four instances of 8 slots, 2 each while Redis fails.
func TestFleetSizeConcurrency(t *testing.T) {
	mock := newMock()
	prefix := redislimit.WithPrefix(testKey(t, "fleet") + ":")
	fleet, faults := liveFleet(t, 4, func(c redis.UniversalClient, opts ...redislimit.Option) (*redislimit.Concurrency, error) {
		lim, err := redislimit.NewConcurrency(c, "fleet", 8, append(opts, prefix, keylimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
		if err == nil {
			t.Cleanup(func() { lim.Close() })
		}
		return lim, err
	})
	for _, lim := range fleet {
		redislimit.Announce(lim)
	}
	for _, lim := range fleet {
		require.Equal(t, 4, redislimit.Announce(lim))
	}
	for _, f := range faults {
		f.on.Store(true)
	}
	for i, lim := range fleet {
		held := 0
		for range 8 {
			if _, r := lim.TryAcquire("k", 1); r.Allowed {
				held++
			}
		}
		require.Equal(t, 2, held, "instance %d: slots held while Redis fails", i)
	}
}

// replyHook answers the fleet script's calls with reply instead of Redis's
// (nil: Redis's).
type replyHook struct{ reply atomic.Pointer[any] }

func (h *replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r := h.reply.Load()
		if c, ok := cmd.(*redis.Cmd); ok && r != nil && err == nil && len(cmd.Args()) > 3 &&
			strings.HasSuffix(fmt.Sprint(cmd.Args()[3]), "#fleet") {
			c.SetVal(*r)
		}
		return err
	}
}

func (h *replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFleetSizeUntrustedReply: a fleet script's reply that is no count (a
// string, a negative or zero count, a float) leaves the size known as it
// was; a huge count is FleetMax, which leaves each instance a share of one,
// never more than the single instance's share; none crashes.
func TestFleetSizeUntrustedReply(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	hook := new(replyHook)
	c.AddHook(hook)
	f := addFaults(c)
	lim, err := redislimit.NewTokenBucket(c, "fleet", keylimit.PerMinute(100), redislimit.WithFleetBeats(true),
		redislimit.WithPrefix(testKey(t, "fleet")+":"), keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
	require.NoError(t, err)
	require.Equal(t, 1, redislimit.Announce(lim))
	for _, r := range []any{int64(3), "garbage", int64(0), int64(-7), 2.5, []any{int64(5)}, nil} {
		hook.reply.Store(&r)
		require.Equal(t, 3, redislimit.Announce(lim), "the size after a reply of %#v", r)
	}
	huge := any(int64(1) << 62)
	hook.reply.Store(&huge)
	require.Equal(t, redislimit.FleetMax, redislimit.Announce(lim), "the size after a reply of 2^62")
	f.on.Store(true)
	admitted := 0
	for range 10 {
		if lim.Allow("k") {
			admitted++
		}
	}
	require.Equal(t, 1, admitted, "admitted while Redis fails, after a reply of 2^62")
}

// FuzzFleetCount: whatever the fleet script replies, a count read is in
// [1, FleetMax], and an integer reply in that range is read as it is.
func FuzzFleetCount(f *testing.F) {
	f.Add(int64(1), "1")
	f.Add(int64(-1), "")
	f.Add(int64(1)<<62, "99999999999999999999")
	f.Fuzz(func(t *testing.T, n int64, s string) {
		for _, v := range []any{n, s, float64(n), []any{n, s}} {
			got, ok := redislimit.FleetCount(v)
			if ok && (got < 1 || got > redislimit.FleetMax) {
				t.Fatalf("FleetCount(%#v) = %d, outside [1, %d]", v, got, redislimit.FleetMax)
			}
			if _, isInt := v.(int64); !isInt && ok {
				t.Fatalf("FleetCount(%#v) read a count from a reply that is no integer", v)
			}
		}
		if got, ok := redislimit.FleetCount(n); (n >= 1 && n <= redislimit.FleetMax) && (!ok || got != int(n)) {
			t.Fatalf("FleetCount(%d) = %d, %v", n, got, ok)
		}
	})
}

// TestFleetAnnouncementsStopOnClose: announcements are sent after calls
// Redis answered, at most one per FleetPeriod, each by a goroutine that
// ends with it; Close waits for the one under way and withdraws the
// instance, and no call after it announces anything or leaves a goroutine
// behind.
func TestFleetAnnouncementsStopOnClose(t *testing.T) {
	mock := newMock()
	c := shared.client(t)
	lim, err := redislimit.NewTokenBucket(c, "fleet", keylimit.PerMinute(1000), redislimit.WithFleetBeats(true),
		redislimit.WithPrefix(testKey(t, "fleet")+":"), keylimit.WithClock(mock), redislimit.WithScriptClock(mock),
		redislimit.WithTimeout(patient))
	require.NoError(t, err)
	key := redislimit.FleetKey(lim)
	members := func() []string {
		m, err := c.ZRange(context.Background(), key, 0, -1).Result()
		require.NoError(t, err)
		return m
	}
	require.Empty(t, members(), "announced before any call")
	require.True(t, lim.Allow("k"))
	require.Eventually(t, func() bool { return len(members()) == 1 }, 10*time.Second, time.Millisecond,
		"the first call Redis answered announces the instance")
	score := func() float64 {
		s, err := c.ZScore(context.Background(), key, members()[0]).Result()
		require.NoError(t, err)
		return s
	}
	first := score()
	for range 10 {
		mock.Add(redislimit.FleetPeriod / 20)
		require.True(t, lim.Allow("k"))
	}
	waitNoBeats(t)
	require.Equal(t, first, score(), "announcements within FleetPeriod of the first")
	mock.Add(redislimit.FleetPeriod)
	require.True(t, lim.Allow("k"))
	require.Eventually(t, func() bool { return score() > first }, 10*time.Second, time.Millisecond,
		"a call FleetPeriod later announces the instance again")

	require.NoError(t, lim.Close())
	require.Empty(t, members(), "the instance after Close")
	require.Zero(t, beats(), "announcements under way after Close")
	for range 5 {
		mock.Add(redislimit.FleetPeriod)
		require.True(t, lim.Allow("k"))
	}
	require.Zero(t, beats(), "announcements under way after calls after Close")
	require.Empty(t, members(), "the instance after calls after Close")
}

// beats counts the goroutines sending an announcement now.
func beats() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "redislimit.(*fleet).beat(")
}

// waitNoBeats waits until no announcement is under way (10 s at most).
func waitNoBeats(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return beats() == 0 }, 10*time.Second, time.Millisecond, "announcements under way")
}

// TestClusterFleetSize: on Redis Cluster the fleet's key is one key, in one
// slot: instances announce themselves, count each other, and withdraw, as
// on one server, whatever slot their prefix hashes to.
func TestClusterFleetSize(t *testing.T) {
	cc := clusterClient(t, theCluster(t))
	for _, p := range []string{testKey(t, "fleet") + ":", testKey(t, "fleet") + ":{tenant}:"} {
		var fleet []*redislimit.TokenBucket
		for range 3 {
			lim, err := redislimit.NewTokenBucket(cc, "fleet", keylimit.PerMinute(30), redislimit.WithFleetBeats(true),
				redislimit.WithPrefix(p), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			fleet = append(fleet, lim)
			require.True(t, lim.Allow("k"), "prefix %q", p) // which announces it, in the background
		}
		waitNoBeats(t)
		// A background announcement may have timed out under load: each
		// announces once more, then each counts the three.
		for _, lim := range fleet {
			redislimit.Announce(lim)
		}
		for i, lim := range fleet {
			require.Equal(t, 3, redislimit.Announce(lim), "prefix %q, instance %d", p, i)
		}
		require.NoError(t, fleet[2].Close())
		require.Equal(t, 2, redislimit.Announce(fleet[0]), "prefix %q: after a Close", p)
	}
}
