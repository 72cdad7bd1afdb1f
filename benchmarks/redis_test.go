package benchmarks

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// allowFunc is a decision as a hotpath.Allower.
type allowFunc func(key string) bool

func (f allowFunc) Allow(key string) bool { return f(key) }

// redisLimit is high enough that every decision of a row is an admission.
var redisLimit = keylimit.PerSecond(1_000_000)

// redisContenders are the rows of BenchmarkRedis, each built on client:
// floor is the round trip itself (EVALSHA of a script that returns 1);
// redis_rate is github.com/go-redis/redis_rate/v10 (a GCRA script); then
// redislimit's three types.
func redisContenders(tb testing.TB, client *redis.Client) []struct {
	name  string
	allow allowFunc
} {
	floor := redis.NewScript("return 1")
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.PerSecond(redisLimit.Events)
	bucket, err := redislimit.NewTokenBucket(client, "bench", redisLimit, redislimit.WithPrefix("bench:bucket:"))
	require.NoError(tb, err)
	fixed, err := redislimit.NewFixedWindow(client, "bench", redisLimit, redislimit.WithPrefix("bench:fixed:"))
	require.NoError(tb, err)
	sliding, err := redislimit.NewSlidingWindow(client, "bench", redisLimit, redislimit.WithPrefix("bench:sliding:"))
	require.NoError(tb, err)
	tb.Cleanup(func() { bucket.Close(); fixed.Close(); sliding.Close() })
	return []struct {
		name  string
		allow allowFunc
	}{
		{"floor", func(key string) bool { return floor.Run(context.Background(), client, []string{key}).Err() == nil }},
		{"redis_rate", func(key string) bool {
			res, err := rr.Allow(context.Background(), key, rrLimit)
			return err == nil && res.Allowed > 0
		}},
		{"redislimit-bucket", bucket.Allow},
		{"redislimit-fixedwindow", fixed.Allow},
		{"redislimit-slidingwindow", sliding.Allow},
	}
}

// startRedis starts a redis-server on 127.0.0.1, stopped when tb ends, and
// returns a client of it as redislimit needs one (context deadlines
// honoured). Without redis-server, tb fails and says how to install it.
func startRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	require.True(tb, redisserver.Installed(), "the Redis comparison needs redis-server, and "+redisserver.InstallHint)
	s, err := redisserver.Start(0)
	require.NoError(tb, err)
	tb.Cleanup(s.Stop)
	client := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { client.Close() })
	return client
}

// BenchmarkRedis measures one admitted decision on Redis, for each of
// redisContenders on one redis-server and one client, in the same run, as
// rows of the hot-path harness: BenchmarkRedis/<contender>/<serial|parallel>.
// Round trips on a shared machine are noisy, so each row also reports
// server-ns/op: the time Redis spent running the script, from INFO
// commandstats, which the client's and the network's noise do not reach.
func BenchmarkRedis(b *testing.B) {
	client := startRedis(b)
	keys := hotpath.Keys(1000)
	for _, c := range redisContenders(b, client) {
		for _, k := range keys { // loads the script, and makes every key
			require.True(b, c.allow(k), "%s refused or failed a first call", c.name)
		}
		for _, parallel := range []bool{false, true} {
			b.Run(c.name+"/"+hotpath.Row{Keys: len(keys), Parallel: parallel}.String(), func(b *testing.B) {
				defer reportServerTime(b, client)()
				hotpath.RunRow(b, c.allow, keys, parallel)
			})
		}
	}
}

// reportServerTime resets the server's command statistics, and returns a
// function that reports the time the server spent per script call since
// then, as server-ns/op.
func reportServerTime(b *testing.B, client *redis.Client) func() {
	ctx := context.Background()
	require.NoError(b, client.ConfigResetStat(ctx).Err())
	return func() {
		info, err := client.Info(ctx, "commandstats").Result()
		require.NoError(b, err)
		var calls, usec int64
		for _, line := range strings.Split(info, "\n") {
			// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
			fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
			if !ok {
				continue
			}
			for _, field := range strings.Split(fields, ",") {
				k, v, _ := strings.Cut(field, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls = n
				case "usec":
					usec = n
				}
			}
		}
		if calls > 0 {
			b.ReportMetric(float64(usec*1000)/float64(calls), "server-ns/op")
		}
	}
}

// TestRedisAllocations pins that each redislimit type allocates less per
// decision than redis_rate on the same server and client. (redislimit's own
// tests pin its count against the client's floor.)
func TestRedisAllocations(t *testing.T) {
	client := startRedis(t)
	contenders := redisContenders(t, client)
	keys := hotpath.Keys(1000)
	allocs := map[string]float64{}
	for _, c := range contenders {
		i := 0
		allocs[c.name] = testing.AllocsPerRun(200, func() {
			i++
			c.allow(keys[i%len(keys)])
		})
	}
	for _, name := range []string{"redislimit-bucket", "redislimit-fixedwindow", "redislimit-slidingwindow"} {
		require.Less(t, allocs[name], allocs["redis_rate"], "%s: allocations per decision, against redis_rate's", name)
	}
}
