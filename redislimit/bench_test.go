package redislimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// benchKeys are distinct keys, made before any test or timer starts.
var benchKeys = func() []string {
	keys := make([]string, 1<<14)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-user-%d", i)
	}
	return keys
}()

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
// the race detector, whose sync.Pool drops some of the reusable calls). The
// comparison with github.com/go-redis/redis_rate, per decision in time and
// allocations, is in the benchmarks module (BenchmarkRedis).
func TestDecisionAllocations(t *testing.T) {
	client := shared.client(t)
	ctx := context.Background()
	floorScript := redis.NewScript("return 1")
	floor := testing.AllocsPerRun(200, func() { floorScript.Run(ctx, client, []string{"k"}) })
	i := 0
	for _, typ := range types {
		lim, err := typ.new(client, keylimit.PerSecond(1_000_000), redislimit.WithTimeout(patient))
		if err != nil {
			t.Fatal(err)
		}
		pinged(t, lim) // no eviction check in the background, whose allocations would count
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
		if ours > limit {
			t.Errorf("%s: %v allocations per decision; want at most %v (the client's floor is %v)",
				typ.name, ours, limit, floor)
		}
	}
}
