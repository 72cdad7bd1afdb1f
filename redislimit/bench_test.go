package redislimit_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// benchKeys are distinct keys, made before any timer starts.
var benchKeys = func() []string {
	keys := make([]string, 1<<14)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-user-%d", i)
	}
	return keys
}()

// BenchmarkDecision measures one admitted decision on Redis, ns/op and
// allocs/op, for each redislimit type and for github.com/go-redis/redis_rate
// (a GCRA script too) on the same server, with the same client, in the same
// run. The floor is the round trip itself: EVALSHA of a script that returns
// 1. The limit is high enough that every decision is an admission.
//
// Round trips on a shared machine are noisy, so each row also reports
// server-ns/op: the time Redis spent running the script, from INFO
// commandstats, which the client's and the network's noise do not reach.
//
//	go test -run '^$' -bench Decision -benchmem ./redislimit
func BenchmarkDecision(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: shared.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	l := keylimit.PerSecond(1_000_000)
	decide := map[string]func(key string) bool{}
	for _, typ := range types {
		lim, err := typ.new(client, l, redislimit.WithPrefix("bench:"+typ.name+":"))
		if err != nil {
			b.Fatal(err)
		}
		decide[typ.name] = lim.Allow
	}
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.PerSecond(1_000_000)
	decide["redis_rate"] = func(key string) bool {
		res, err := rr.Allow(context.Background(), key, rrLimit)
		return err == nil && res.Allowed > 0
	}
	floor := redis.NewScript("return 1")
	decide["floor"] = func(key string) bool {
		return floor.Run(context.Background(), client, []string{key}).Err() == nil
	}

	for _, name := range []string{"floor", "redis_rate", "TokenBucket", "FixedWindow", "SlidingWindow"} {
		allow := decide[name]
		if !allow("warm-up") { // loads the script
			b.Fatalf("%s refused or failed its first call", name)
		}
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			defer reportServerTime(b, client)()
			for i := 0; b.Loop(); i++ {
				if !allow(benchKeys[i%len(benchKeys)]) {
					b.Fatalf("%s: decision %d refused or failed", name, i)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			defer reportServerTime(b, client)()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !allow(benchKeys[next.Add(1)%int64(len(benchKeys))]) {
						b.Errorf("%s: a decision was refused or failed", name)
						return
					}
				}
			})
		})
	}
}

// reportServerTime resets the server's command statistics, and returns a
// function that reports the time the server spent per script call since
// then, as server-ns/op.
func reportServerTime(b *testing.B, client *redis.Client) func() {
	ctx := context.Background()
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	return func() {
		info, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		var calls, usec int64
		for _, line := range strings.Split(info, "\n") {
			// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
			if !strings.HasPrefix(line, "cmdstat_evalsha:") {
				continue
			}
			for _, field := range strings.Split(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"), ",") {
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

// BenchmarkDenied measures a flood on a key that Redis has refused: each
// call is answered by the deny cache, in process, with no round trip.
//
//	go test -run '^$' -bench Denied -benchmem ./redislimit
func BenchmarkDenied(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: shared.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	for _, typ := range types {
		lim, err := typ.new(client, keylimit.PerHour(1), redislimit.WithTimeout(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("bench-denied-%d", time.Now().UnixNano())
		lim.Allow(key)
		if lim.Allow(key) {
			b.Fatal("the second call on a quota of 1 passed")
		}
		b.Run(typ.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if lim.Allow(key) {
					b.Fatal("a denied key was admitted")
				}
			}
		})
		b.Run(typ.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if lim.Allow(key) {
						b.Error("a denied key was admitted")
						return
					}
				}
			})
		})
	}
}

// TestDecisionAllocations pins what a decision costs in allocations beside
// the client's own floor (the same client running a script that returns 1):
// at most 2 more (the prefixed key, and the reply the client reads; 3 under
// the race detector, whose sync.Pool drops some of the reusable calls), and
// fewer than redis_rate's on the same server.
func TestDecisionAllocations(t *testing.T) {
	client := shared.client(t)
	ctx := context.Background()
	floorScript := redis.NewScript("return 1")
	floor := testing.AllocsPerRun(200, func() { floorScript.Run(ctx, client, []string{"k"}) })
	rr := redis_rate.NewLimiter(client)
	rrLimit := redis_rate.PerSecond(1_000_000)
	i := 0
	theirs := testing.AllocsPerRun(200, func() {
		i++
		rr.Allow(ctx, benchKeys[i%len(benchKeys)], rrLimit)
	})
	for _, typ := range types {
		lim, err := typ.new(client, keylimit.PerSecond(1_000_000), redislimit.WithTimeout(patient))
		if err != nil {
			t.Fatal(err)
		}
		ours := testing.AllocsPerRun(200, func() {
			i++
			if !lim.Allow(benchKeys[i%len(benchKeys)]) {
				t.Fatal("refused")
			}
		})
		limit := floor + 2
		if raceEnabled {
			limit++
		}
		if ours > limit || ours >= theirs {
			t.Errorf("%s: %v allocations per decision; want at most %v (the client's floor is %v), and fewer than redis_rate's %v",
				typ.name, ours, limit, floor, theirs)
		}
	}
}
