package redislimit_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// The messages of the checks of the server.
const (
	mayEvict      = "redislimit: Redis may evict the limiter's keys"
	noDisk        = "redislimit: Redis keeps the limiter's keys in memory only"
	configRefused = "redislimit: Redis refused CONFIG GET"
)

// serverWith starts a server of the test's own with extra flags, which
// keeps nothing on disk.
func serverWith(t *testing.T, flags ...string) *server {
	t.Helper()
	s, err := redisserver.Start(0, flags...)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return &server{Server: s}
}

// persistentWith is serverWith, but the server keeps an append-only file
// (fsynced at every write, so that a Kill loses nothing).
func persistentWith(t *testing.T, flags ...string) *server {
	t.Helper()
	s, err := redisserver.StartAppendOnly(0, append([]string{"--appendfsync", "always"}, flags...)...)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return &server{Server: s}
}

// configGets returns how many CONFIG GETs s has run.
func (s *server) configGets(t *testing.T) int64 {
	return s.commandStats(t)["config|get"]
}

// TestEvictionResetsQuotas pins issue 13.2: with maxmemory set and an LRU
// policy (allkeys-lru, or volatile-lru, since every limiter key has a TTL),
// a flood of other keys evicted a key's state and its quota started afresh,
// silently. The policy is now read at the first successful call and warned
// of once; Ping says so too. And the documented behaviour is shown: the
// flood evicts the key, and a quota of 10 an hour admits 20 within the hour.
func TestEvictionResetsQuotas(t *testing.T) {
	t.Parallel() // its own servers
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			s := serverWith(t, "--maxmemory", "4mb", "--maxmemory-policy", policy)
			c := s.client(t)
			rec, logger := newLogRecorder(slog.LevelDebug)
			lim, err := redislimit.NewFixedWindow(c, "victim", keylimit.PerHour(10), redislimit.WithTimeout(patient),
				redislimit.WithDenyCacheSize(0), keylimit.WithLogger(logger))
			require.NoError(t, err)
			require.True(t, lim.AllowN("alice", 10), "10 of 10 an hour")
			require.False(t, lim.Allow("alice"), "the 11th")

			warnings := rec.waitLogged(t, mayEvict)
			require.Len(t, warnings, 1, "warnings after the first calls")
			require.Equal(t, slog.LevelWarn, warnings[0].Level)
			require.Equal(t, "victim", warnings[0].Attrs["limiter"])
			require.Contains(t, warnings[0].Attrs["error"], "maxmemory is 4194304 bytes with maxmemory-policy "+policy)
			gets := s.configGets(t)
			for range 50 {
				lim.Allow("alice")
			}
			require.Equal(t, gets, s.configGets(t), "CONFIG GETs after 50 more calls")
			err = lim.Ping(context.Background())
			require.ErrorIs(t, err, redislimit.ErrEvictionPolicy, "Ping")
			require.ErrorContains(t, err, "set maxmemory-policy noeviction")
			require.Len(t, rec.logged(mayEvict), 1, "warnings after Ping too")

			// The flood: other keys, without a TTL, until alice's state is
			// evicted. Under volatile-lru only keys with a TTL can go, and
			// alice's is one; once none is left, Redis refuses the SETs.
			ctx := context.Background()
			filler := strings.Repeat("x", 64<<10)
			for i := 0; ; i++ {
				n, err := c.Exists(ctx, lim.StateKey("alice")).Result()
				require.NoError(t, err)
				if n == 0 {
					break
				}
				require.Less(t, i, 1000, "alice's state was not evicted by 64 MB of other keys")
				if err := c.Set(ctx, "filler:"+strconv.Itoa(i), filler, 0).Err(); err != nil {
					require.ErrorContains(t, err, "OOM command not allowed", "a SET of the flood")
				}
			}
			r, err := lim.TakeContext(ctx, "alice", 10)
			require.NoError(t, err, "10 more within the hour, decided by Redis")
			require.True(t, r.Allowed, "10 more within the hour, once alice's state was evicted")
		})
	}
}

// TestRestartWithoutPersistence pins issue 24.7: a Redis that keeps nothing
// on disk forgets every limiter key when it restarts, and every quota
// starts afresh: a fixed window of 10 an hour admitted 10 more within the
// hour, silently. Now it is said: the limiter warns once after its first
// call, and Ping returns ErrNoPersistence. With an append-only file the
// quota holds across a Kill and a Restart, and nothing is said. Either way
// a refusal the deny cache remembers still answers after the restart (it
// hides a reset for up to its RetryAfter).
func TestRestartWithoutPersistence(t *testing.T) {
	t.Parallel() // its own servers
	for _, persisted := range []bool{false, true} {
		t.Run(map[bool]string{false: "NothingOnDisk", true: "AppendOnly"}[persisted], func(t *testing.T) {
			t.Parallel()
			s := serverWith(t)
			if persisted {
				s = persistentWith(t)
			}
			rec, logger := newLogRecorder(slog.LevelDebug)
			lim, err := redislimit.NewFixedWindow(s.client(t), "quota", keylimit.PerHour(10), redislimit.WithTimeout(patient),
				redislimit.WithDenyCacheSize(0), redislimit.WithFailurePolicy(redislimit.FailClosed()), keylimit.WithLogger(logger))
			require.NoError(t, err)
			cached, err := redislimit.NewFixedWindow(s.client(t), "quota", keylimit.PerHour(10), redislimit.WithTimeout(patient),
				keylimit.WithLogger(slog.New(slog.DiscardHandler)))
			require.NoError(t, err)
			require.True(t, lim.AllowN("alice", 10), "10 of 10 an hour")
			require.False(t, cached.Allow("alice"), "the 11th, remembered by the deny cache")

			err = lim.Ping(context.Background())
			if persisted {
				for deadline := time.Now().Add(10 * time.Second); s.configGets(t) < 6; time.Sleep(5 * time.Millisecond) {
					require.True(t, time.Now().Before(deadline), "no check after the first call within 10s")
				}
				require.NoError(t, err, "Ping")
				require.Empty(t, rec.logged(noDisk), "warnings")
			} else {
				warnings := rec.waitLogged(t, noDisk)
				require.Len(t, warnings, 1, "warnings after the first call and Ping")
				require.Equal(t, slog.LevelWarn, warnings[0].Level)
				require.Equal(t, "quota", warnings[0].Attrs["limiter"])
				require.ErrorIs(t, err, redislimit.ErrNoPersistence, "Ping")
				require.NotErrorIs(t, err, redislimit.ErrEvictionPolicy, "Ping")
				require.ErrorContains(t, err, `save is "" and appendonly is no`)
				require.ErrorContains(t, err, "set appendonly yes")
			}

			s.Kill()
			require.NoError(t, s.Restart())
			waitUntilBack(t, lim)
			more := drain(t, lim, "alice")
			t.Logf("appendonly %v: a fixed window of 10 an hour admitted 10, then %d more after a restart", persisted, more)
			require.Equal(t, map[bool]int{false: 10, true: 0}[persisted], more, "admitted after the restart, within the hour")
			require.False(t, cached.Allow("alice"), "the deny cache, after the restart")
		})
	}
}

// TestPersistenceRisk: a server keeps its data (no error) with RDB
// snapshots, an append-only file or both, and when it does not say (a
// CONFIG GET that returns nothing for a parameter); only save "" with
// appendonly no is ErrNoPersistence.
func TestPersistenceRisk(t *testing.T) {
	for _, tc := range []struct {
		save, aof map[string]string
		risk      bool
	}{
		{map[string]string{"save": ""}, map[string]string{"appendonly": "no"}, true},
		{map[string]string{"save": "3600 1 300 100 60 10000"}, map[string]string{"appendonly": "no"}, false},
		{map[string]string{"save": ""}, map[string]string{"appendonly": "yes"}, false},
		{map[string]string{}, map[string]string{"appendonly": "no"}, false},
		{map[string]string{"save": ""}, map[string]string{}, false},
	} {
		err := redislimit.PersistenceRisk(tc.save, tc.aof)
		require.Equal(t, tc.risk, errors.Is(err, redislimit.ErrNoPersistence), "save %v, appendonly %v: %v", tc.save, tc.aof, err)
	}
}

// TestSafeEvictionPolicies: no warning, and Ping passes, where Redis cannot
// evict a limiter key (noeviction, or any policy with no maxmemory) and
// keeps its data on disk.
func TestSafeEvictionPolicies(t *testing.T) {
	t.Parallel() // its own servers
	for _, flags := range [][]string{
		{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"},
		{"--maxmemory-policy", "allkeys-lru"}, // maxmemory 0: no limit, nothing evicted
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			t.Parallel()
			s := persistentWith(t, flags...)
			rec, logger := newLogRecorder(slog.LevelDebug)
			lim, err := redislimit.NewTokenBucket(s.client(t), "api", keylimit.PerHour(10), redislimit.WithTimeout(patient),
				keylimit.WithLogger(logger))
			require.NoError(t, err)
			require.True(t, lim.Allow("k"))
			for deadline := time.Now().Add(10 * time.Second); s.configGets(t) == 0; time.Sleep(5 * time.Millisecond) {
				require.True(t, time.Now().Before(deadline), "no CONFIG GET within 10s of the first call")
			}
			require.NoError(t, lim.Ping(context.Background()), "Ping")
			require.Empty(t, rec.logged("redislimit: Redis"), "lines about Redis")
		})
	}
}

// TestConfigRefused: a managed Redis may refuse CONFIG (here renamed away):
// the limiter says once, at Debug, that it cannot tell, and Ping passes.
func TestConfigRefused(t *testing.T) {
	t.Parallel() // its own server
	s := serverWith(t, "--rename-command", "CONFIG", "")
	rec, logger := newLogRecorder(slog.LevelDebug)
	lim, err := redislimit.NewSlidingWindow(s.client(t), "api", keylimit.PerHour(10), redislimit.WithTimeout(patient),
		keylimit.WithLogger(logger))
	require.NoError(t, err)
	require.True(t, lim.Allow("k"))
	lines := rec.waitLogged(t, configRefused)
	require.Equal(t, slog.LevelDebug, lines[0].Level)
	require.Contains(t, lines[0].Attrs["error"], "unknown command")
	require.NoError(t, lim.Ping(context.Background()), "Ping")
	for range 10 {
		lim.Allow("k")
	}
	require.Len(t, rec.logged(configRefused), 1, "lines saying CONFIG GET was refused")
	require.Empty(t, rec.logged(mayEvict), "warnings")
}

// TestPing: Ping asks Redis once for PING, three times for SCRIPT LOAD (the
// full script, the bucket's plain one and its batch), and three CONFIG GETs in one round
// trip (the eviction policy, save and appendonly), so that the first
// decision after it finds its script loaded (EVALSHA alone), and says what
// failed.
func TestPing(t *testing.T) {
	s := persistentWith(t)
	lim, err := redislimit.NewTokenBucket(s.client(t), "api", keylimit.PerHour(10), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	ctx := context.Background()
	before := s.commandStats(t)
	require.NoError(t, lim.Ping(ctx))
	sent := s.sentSince(t, before)
	require.Equal(t, map[string]int64{"ping": 1, "script|load": 3, "config|get": 3}, sent, "sent by Ping")
	before = s.commandStats(t)
	require.True(t, lim.Allow("k"))
	require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "what the first decision sent after Ping")

	dead, err := redislimit.NewTokenBucket(deadClient(t), "api", keylimit.PerHour(10))
	require.NoError(t, err)
	require.ErrorContains(t, dead.Ping(ctx), "redislimit: api: PING: dial tcp")
}
