package benchmarks

import (
	"context"
	"fmt"
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

// cpuLimit is the loose limit BenchmarkRedisCPU puts every contender
// under, a billion a second with a burst of a billion: no decision is a
// refusal. (At this rate redis_rate's TAT, a float of seconds since 2017,
// cannot hold one event's 1 ns: its script reads the key and writes
// nothing, so it counts nothing. Its row is the cost of TIME and GET.)
var cpuLimit = keylimit.Per(1_000_000_000, time.Second).WithBurst(1_000_000_000)

// countingLimit is BenchmarkRedisCPUCounting's: 100 a second with a burst
// of 100, which a key taken about twice a second never reaches, and at
// which redis_rate's script counts (it writes the TAT it moved).
var countingLimit = keylimit.PerSecond(100).WithBurst(100)

// cpuSlice is how many decisions BenchmarkRedisCPU makes for one contender
// before it moves on to the next.
const cpuSlice = 2000

// BenchmarkRedisCPU measures the Redis CPU of one decision for redis_rate
// and redislimit's three types, each built as a user builds it by default
// (only WithPrefix: the default failure policy, timeout and logger), under
// cpuLimit, loadInFlight's 64 decisions in flight over loadKeys keys. Each
// of the b.N rounds makes cpuSlice decisions of every contender in turn, so
// that the load of a shared machine falls on all of them alike. It reports,
// for each contender, <name>-redis-µs/decision: the server's time in script
// calls (INFO commandstats: usec of EVALSHA and EVAL, after CONFIG
// RESETSTAT) per decision made on Redis; <name>-cpu-µs/decision: the
// server process's CPU time (INFO cpu: used_cpu_user + used_cpu_sys) per
// such decision, its networking included, which a descheduled server does
// not inflate; <name>/redis_rate: its redis-µs/decision as a fraction of
// redis_rate's in the same run (the figure); <name>-calls/op, the
// script calls per decision (1 for redis_rate, less where decisions share
// a call: lua/take_batch.lua); and <name>-fallbacks/op, the decisions the
// failure policy made instead (a call over the default timeout, on a busy
// machine), which cost Redis nothing and are not counted. redis_rate makes
// one call a decision, so its usec_per_call is its figure.
// Run it with -benchtime=<rounds>x.
func BenchmarkRedisCPU(b *testing.B) {
	client := startRedis(b)
	redisCPU(b, client, cpuContenders(b, client, cpuLimit))
}

// BenchmarkRedisCPUCounting is BenchmarkRedisCPU under countingLimit: the
// same decisions, every contender counting them.
func BenchmarkRedisCPUCounting(b *testing.B) {
	client := startRedis(b)
	redisCPU(b, client, cpuContenders(b, client, countingLimit))
}

// BenchmarkRedisCPUFloor is BenchmarkRedisCPU with redis_rate, the
// TokenBucket and the SlidingWindow beside scripts that run only the
// commands a take of each shape cannot do without (cpuFloors): the least
// that the figure can be for a script that records its take on
// Redis's clock. It reports BenchmarkRedisCPU's figures for each row.
func BenchmarkRedisCPUFloor(b *testing.B) {
	client := startRedis(b)
	var rows []cpuRow
	for _, c := range cpuContenders(b, client, cpuLimit) {
		if c.name != "fixedwindow" {
			rows = append(rows, c)
		}
	}
	for _, f := range cpuFloors {
		script := redis.NewScript(f.script)
		prefix := "cpu:" + f.name + ":"
		rows = append(rows, cpuRow{name: f.name, allow: func(key string) bool {
			return script.Run(context.Background(), client, []string{prefix + key}).Err() == nil
		}})
	}
	redisCPU(b, client, rows)
}

// cpuFloors are BenchmarkRedisCPUFloor's scripts, none a limiter: each runs
// the commands of one shape of take with no ARGV, a value of a few bytes
// and next to no Lua, on keys of their own.
var cpuFloors = []struct{ name, script string }{
	// What redis_rate's script runs under cpuLimit (it writes nothing).
	{"floor-read", `redis.call('TIME') redis.call('GET', KEYS[1]) return 1`},
	// The least a take can run that records itself on Redis's clock: TIME,
	// and one SET that makes the key (the keys of cpuLimit's states expire
	// long before the harness comes back to them).
	{"floor-record", `redis.call('TIME') redis.call('SET', KEYS[1], 'x', 'NX', 'PX', '1', 'GET') return 1`},
	// floor-record on a key that is still there when the harness comes
	// back to it (it lives 1 s; a key comes back every 400–560 ms): one SET
	// that overwrites it, and reads it, as a bucket kept alive past its
	// refill would run. Against floor-record: whether making the key, and
	// its expiry between takes, is what a write costs.
	{"floor-overwrite", `redis.call('TIME') redis.call('SET', KEYS[1], 'x', 'PX', '1000', 'GET') return 1`},
	// The commands of take_sliding.lua's appendable log at a period of a
	// second: a log named by the second of its last SET, which expires a
	// period and an epoch later (2001 ms); taken again in that second, one
	// APPEND; in a later one, one SET that moves its expiry.
	{"floor-log", `local s = redis.call('TIME')[1]
local log = redis.call('SET', KEYS[1], s, 'NX', 'PX', '2001', 'GET')
if log and string.sub(log, 1, #s) == s then redis.call('APPEND', KEYS[1], 'x')
elseif log then redis.call('SET', KEYS[1], s .. string.sub(log, #s + 1) .. 'x', 'PX', '2001') end
return 1`},
	// floor-log if its expiry never had to move (which no limiter's log
	// may do): every take found is one APPEND. floor-log less this is
	// what moving the expiry costs.
	{"floor-append", `local s = redis.call('TIME')[1]
if redis.call('SET', KEYS[1], s, 'NX', 'PX', '2001', 'GET') then redis.call('APPEND', KEYS[1], 'x') end
return 1`},
}

// redisCPU runs BenchmarkRedisCPU's harness over contenders, on client,
// the first of them redis_rate, and reports BenchmarkRedisCPU's figures
// for each row.
func redisCPU(b *testing.B, client *redis.Client, contenders []cpuRow) {
	require.Equal(b, "redis_rate", contenders[0].name, "the row the others are a fraction of")
	keys := hotpath.Keys(loadKeys)
	for _, c := range contenders {
		for _, k := range keys { // loads the script, and makes every key
			require.True(b, c.allow(k), "%s refused a first call", c.name)
		}
	}
	usec := make([]int64, len(contenders))
	calls := make([]int64, len(contenders))
	fallbacks := make([]uint64, len(contenders))
	cpu := make([]float64, len(contenders))
	ctx := context.Background()
	from := 0
	b.ResetTimer()
	for range b.N {
		for i, c := range contenders {
			require.NoError(b, client.ConfigResetStat(ctx).Err())
			cpu0, fallbacks0 := serverCPU(b, client), c.fallbacks()
			require.Zero(b, decide(c.allow, keys, from, cpuSlice, 64), "%s: decisions refused under a loose limit", c.name)
			cpu[i] += serverCPU(b, client) - cpu0
			fallbacks[i] += c.fallbacks() - fallbacks0
			u, n := serverTime(b, client)
			usec[i] += u
			calls[i] += n
		}
		from += cpuSlice
	}
	b.StopTimer()
	decisions := float64(b.N * cpuSlice)
	perDecision := make([]float64, len(contenders))
	for i, c := range contenders {
		onRedis := max(decisions-float64(fallbacks[i]), 1)
		perDecision[i] = float64(usec[i]) / onRedis
		b.ReportMetric(perDecision[i], c.name+"-redis-µs/decision")
		b.ReportMetric(perDecision[i]/perDecision[0], c.name+"/redis_rate")
		b.ReportMetric(cpu[i]*1e6/onRedis, c.name+"-cpu-µs/decision")
		b.ReportMetric(float64(calls[i])/onRedis, c.name+"-calls/op")
		b.ReportMetric(float64(fallbacks[i])/decisions, c.name+"-fallbacks/op")
	}
}

// cpuRow is a row of BenchmarkRedisCPU: a contender's name and decision,
// and for a redislimit limiter its Stats' Fallbacks (nil: the row makes
// every decision on Redis, or fails).
type cpuRow struct {
	name  string
	allow allowFunc
	stats interface{ Stats() keylimit.Stats }
}

// fallbacks returns the decisions r's failure policy has made so far.
func (r cpuRow) fallbacks() uint64 {
	if r.stats == nil {
		return 0
	}
	return r.stats.Stats().Fallbacks
}

// cpuContenders are BenchmarkRedisCPU's rows, on client, under limit.
func cpuContenders(tb testing.TB, client *redis.Client, limit keylimit.Limit) []cpuRow {
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.Limit{Rate: limit.Events, Burst: limit.BurstSize(), Period: limit.Period}
	bucket, err := redislimit.NewTokenBucket(client, "cpu", limit, redislimit.WithPrefix("cpu:bucket:"))
	require.NoError(tb, err)
	fixed, err := redislimit.NewFixedWindow(client, "cpu", limit, redislimit.WithPrefix("cpu:fixed:"))
	require.NoError(tb, err)
	sliding, err := redislimit.NewSlidingWindow(client, "cpu", limit, redislimit.WithPrefix("cpu:sliding:"))
	require.NoError(tb, err)
	tb.Cleanup(func() { bucket.Close(); fixed.Close(); sliding.Close() })
	return []cpuRow{
		{name: "redis_rate", allow: func(key string) bool {
			res, err := rr.Allow(context.Background(), key, rrLimit)
			return err == nil && res.Allowed > 0
		}},
		{"bucket", bucket.Allow, bucket},
		{"fixedwindow", fixed.Allow, fixed},
		{"slidingwindow", sliding.Allow, sliding},
	}
}

// decide makes n decisions of allow, inflight at a time, on keys from
// index from on, in turn, and returns how many were refused.
func decide(allow allowFunc, keys []string, from, n, inflight int) int64 {
	var next, refused atomic.Int64
	var wg sync.WaitGroup
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if !allow(keys[(from+int(i))%len(keys)]) {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return refused.Load()
}

// serverCPU returns the CPU time the server process has used, in seconds,
// from INFO cpu.
func serverCPU(b *testing.B, client *redis.Client) float64 {
	info, err := client.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			var f float64
			_, err := fmt.Sscanf(v, "%f", &f)
			require.NoError(b, err, "INFO cpu: %q", line)
			total += f
		}
	}
	return total
}
