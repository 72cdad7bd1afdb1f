package benchmarks

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// loadKeys is how many distinct keys BenchmarkRedisLoad spreads its
// decisions over, in turn: no key is hot.
const loadKeys = 10_000

// loadInFlight are the decisions BenchmarkRedisLoad keeps in flight at once:
// one caller, two, and a busy instance's 64.
var loadInFlight = []int{1, 2, 64}

// BenchmarkRedisLoad measures what a decision costs Redis and how many an
// instance makes per second, for redis_rate and redislimit's types, on one
// redis-server and one client, in one run:
// BenchmarkRedisLoad/<contender>/inflight=<1|2|64>. Every decision is an
// admission (redisLimit), on one of loadKeys keys in turn. Each row reports
//   - redis-µs/op: the server's time in the row's script calls (INFO
//     commandstats after CONFIG RESETSTAT: usec of EVALSHA and EVAL, which
//     includes the commands a script runs), per decision: the Redis CPU a
//     decision costs;
//   - calls/op: those calls per decision (below 1 where decisions made
//     at once share a call: lua/take_batch.lua);
//   - decisions/s, and p50-µs and p99-µs: one decision's wall time as its
//     caller saw it.
func BenchmarkRedisLoad(b *testing.B) {
	client := startRedis(b)
	keys := hotpath.Keys(loadKeys)
	for _, c := range loadContenders(b, client) {
		for _, k := range keys { // loads the script, and makes every key
			require.True(b, c.allow(k), "%s refused or failed a first call", c.name)
		}
		for _, inflight := range loadInFlight {
			b.Run(c.name+"/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
				runLoad(b, client, c.allow, keys, inflight)
			})
		}
	}
}

// loadContenders are BenchmarkRedisLoad's rows: redis_rate
// (github.com/go-redis/redis_rate/v10, a GCRA script), redislimit's three
// types, and the token bucket with leases of 20ms.
func loadContenders(tb testing.TB, client *redis.Client) []struct {
	name  string
	allow allowFunc
} {
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.PerSecond(redisLimit.Events)
	// Every decision is Redis's: a failed call is a refusal, which fails the
	// row, and the timeout is long enough that none fails on a busy machine
	// (redis_rate has none). The server keeps nothing on disk, which the
	// limiters would warn of.
	opts := func(prefix string, more ...redislimit.Option) []redislimit.Option {
		return append([]redislimit.Option{redislimit.WithPrefix(prefix), redislimit.WithFailurePolicy(redislimit.FailClosed()),
			redislimit.WithTimeout(10 * time.Second), keylimit.WithLogger(slog.New(slog.DiscardHandler))}, more...)
	}
	bucket, err := redislimit.NewTokenBucket(client, "load", redisLimit, opts("load:bucket:")...)
	require.NoError(tb, err)
	fixed, err := redislimit.NewFixedWindow(client, "load", redisLimit, opts("load:fixed:")...)
	require.NoError(tb, err)
	sliding, err := redislimit.NewSlidingWindow(client, "load", redisLimit, opts("load:sliding:")...)
	require.NoError(tb, err)
	leased, err := redislimit.NewTokenBucket(client, "load", redisLimit, opts("load:leased:", redislimit.WithLeases(20*time.Millisecond))...)
	require.NoError(tb, err)
	tb.Cleanup(func() { bucket.Close(); fixed.Close(); sliding.Close(); leased.Close() })
	return []struct {
		name  string
		allow allowFunc
	}{
		{"redis_rate", func(key string) bool {
			res, err := rr.Allow(context.Background(), key, rrLimit)
			return err == nil && res.Allowed > 0
		}},
		{"redislimit-bucket", bucket.Allow},
		{"redislimit-fixedwindow", fixed.Allow},
		{"redislimit-slidingwindow", sliding.Allow},
		{"redislimit-bucket-leases20ms", leased.Allow},
	}
}

// runLoad makes b.N decisions of allow, inflight at a time, on keys in
// turn, and reports BenchmarkRedisLoad's metrics. It fails b if a decision
// is a refusal or an error: the limit is loose, so that would be a fault.
func runLoad(b *testing.B, client *redis.Client, allow allowFunc, keys []string, inflight int) {
	ctx := context.Background()
	require.NoError(b, client.ConfigResetStat(ctx).Err())
	var next, refused atomic.Int64
	lat := make([][]time.Duration, inflight)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/inflight+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					break
				}
				t0 := time.Now()
				if !allow(keys[i%int64(len(keys))]) {
					refused.Add(1)
				}
				mine = append(mine, time.Since(t0))
			}
			lat[w] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	require.Zero(b, refused.Load(), "decisions refused or failed under a loose limit")
	usec, calls := serverTime(b, client)
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := float64(b.N)
	b.ReportMetric(float64(usec)/n, "redis-µs/op")
	b.ReportMetric(float64(calls)/n, "calls/op")
	b.ReportMetric(n/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}

// serverTime returns the µs the server spent in script calls since the last
// CONFIG RESETSTAT, and how many it ran, from INFO commandstats: EVAL and
// EVALSHA, whose time includes the commands the script ran (which the
// statistics list too, and are not counted again).
func serverTime(b *testing.B, client *redis.Client) (usec, calls int64) {
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err)
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		for _, field := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return usec, calls
}
