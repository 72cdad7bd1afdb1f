package redislimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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

// BenchmarkLeases measures an admitted call on one hot key, side by side in
// one run: keylimit's in-memory TokenBucket, a Redis TokenBucket with leases
// (WithLeases(100ms): a round trip about every lease time, the rest in
// process), and one without (a round trip per call). The limit is high
// enough that every call is admitted. Each row reports Redis script calls
// per op.
//
//	go test -run '^$' -bench Leases -cpu 1,2 ./redislimit
func BenchmarkLeases(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: shared.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	l := keylimit.PerSecond(1_000_000_000)
	key := []string{fmt.Sprintf("bench-hot-%d", time.Now().UnixNano())}
	memory, err := keylimit.NewTokenBucket[string](l)
	require.NoError(b, err)
	defer memory.Close()
	leased, err := redislimit.NewTokenBucket(client, "bench-leased", l, redislimit.WithLeases(100*time.Millisecond))
	require.NoError(b, err)
	defer leased.Close()
	plain, err := redislimit.NewTokenBucket(client, "bench-plain", l)
	require.NoError(b, err)
	defer plain.Close()
	for _, row := range []struct {
		name string
		lim  hotpath.Allower
		st   func() keylimit.Stats
	}{
		{"memory", memory, nil},
		{"leased", leased, leased.Stats},
		{"redis", plain, plain.Stats},
	} {
		for _, parallel := range []bool{false, true} {
			b.Run(row.name+"/"+hotpath.Row{Keys: 1, Parallel: parallel}.String(), func(b *testing.B) {
				require.True(b, row.lim.Allow(key[0]), "a first call refused")
				var calls uint64
				if row.st != nil {
					calls = row.st().Calls
				}
				hotpath.RunRow(b, row.lim, key, parallel)
				if row.st != nil {
					b.ReportMetric(float64(row.st().Calls-calls)/float64(b.N), "calls/op")
				}
			})
		}
	}
}

// TestDecisionAllocations pins what a decision costs in allocations beside
// the client's own floor (the same client running a script of one key that
// returns 1): at most 2 more for a limiter, with a per-key limit or
// without (its Redis key, and the reply the client reads), and 3 more per
// limiter joined by keylimit.All (the client boxes each further key); one
// more under the race detector, whose sync.Pool drops some of the reusable
// calls. The comparison with github.com/go-redis/redis_rate, per decision in
// time and allocations, is in the benchmarks module (BenchmarkRedis).
func TestDecisionAllocations(t *testing.T) {
	// AllocsPerRun counts every goroutine's allocations: wait until the
	// cluster TestMain starts in the background is up, and polls no more.
	<-clusterReady
	client := shared.client(t)
	ctx := context.Background()
	floorScript := redis.NewScript("return 1")
	floor := testing.AllocsPerRun(200, func() { floorScript.Run(ctx, client, []string{"k"}) })
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	i := 0
	var all []keylimit.Limiter[string]
	for _, typ := range types {
		for _, perKey := range []bool{false, true} {
			lim, err := typ.new(client, keylimit.PerSecond(1_000_000), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			if perKey {
				keyLimited(t, lim, func(key string) keylimit.Limit {
					if strings.HasSuffix(key, "7") {
						return keylimit.PerSecond(2_000_000)
					}
					return keylimit.Limit{}
				})
			}
			pinged(t, lim) // no eviction check in the background, whose allocations would count
			if !perKey {
				all = append(all, lim)
			}
			ours := testing.AllocsPerRun(200, func() {
				i++
				lim.Allow(benchKeys[i%len(benchKeys)])
			})
			require.LessOrEqual(t, ours, floor+2+slack, "%s, per-key limits %v: allocations per decision (the client's floor is %v)",
				typ.name, perKey, floor)
		}
	}
	joined := keylimit.All(all...)
	ours := testing.AllocsPerRun(200, func() {
		i++
		joined.Allow(benchKeys[i%len(benchKeys)])
	})
	require.LessOrEqual(t, ours, floor+3*float64(len(all))-1+slack, "joined: allocations per decision of %d limiters (the client's floor is %v)",
		len(all), floor)
}
