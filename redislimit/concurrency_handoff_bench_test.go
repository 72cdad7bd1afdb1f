package redislimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// BenchmarkConcurrencyFleetHandoff (issue 39) measures what serving waiters
// across instances in order costs: 4 instances of a Concurrency of 1 slot,
// 4 goroutines each, every one Acquiring the slot, holding it 1 ms and
// releasing it, for 2 s. It reports the acquisitions per second (at most
// 1,000: the slot is held 1 ms each time) and the share of acquisitions
// that went to another instance than the one before.
//
//	go test -run '^$' -bench ConcurrencyFleetHandoff -benchtime 1x ./redislimit
func BenchmarkConcurrencyFleetHandoff(b *testing.B) {
	const instances, goroutines, hold = 4, 4, time.Millisecond
	run := 2 * time.Second
	if testing.Short() { // CI runs every benchmark once, to see that it runs
		run = 300 * time.Millisecond
	}
	for b.Loop() {
		prefix := redislimit.WithPrefix(testKey(b, "handoff") + ":")
		fleet := make([]*redislimit.Concurrency, instances)
		for i := range fleet {
			c := redis.NewClient(&redis.Options{Addr: shared.Addr, ContextTimeoutEnabled: true})
			lim, err := redislimit.NewConcurrency(c, "handoff", 1, prefix, redislimit.WithTimeout(patient))
			if err != nil {
				b.Fatal(err)
			}
			fleet[i] = lim
			defer c.Close()
			defer lim.Close()
		}
		var acquired, moved atomic.Int64
		var last atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), run)
		var wg sync.WaitGroup
		for i, lim := range fleet {
			for range goroutines {
				wg.Go(func() {
					for {
						p, err := lim.Acquire(ctx, "k", 1)
						if err != nil {
							return
						}
						acquired.Add(1)
						if last.Swap(int64(i)) != int64(i) {
							moved.Add(1)
						}
						time.Sleep(hold)
						p.Release()
					}
				})
			}
		}
		wg.Wait()
		cancel()
		b.ReportMetric(float64(acquired.Load())/run.Seconds(), "acquisitions/s")
		b.ReportMetric(float64(moved.Load())/float64(max(acquired.Load(), 1)), "moved/acquisition")
	}
}
