package benchmarks

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/stretchr/testify/require"
)

// semaphoreSlots is the slots per key of the benchmark rows: more than the
// goroutines of any row, so that no call waits and a row measures one
// acquisition and its release.
const semaphoreSlots = 64

// semaphoreRows are the rows every keyed semaphore runs.
var semaphoreRows = []hotpath.Row{{Keys: 1}, {Keys: 1, Parallel: true}, {Keys: 10_000}, {Keys: 10_000, Parallel: true}}

// BenchmarkAcquireRelease is one slot of a key acquired and released, on a
// key the semaphore holds already:
//
//	BenchmarkAcquireRelease/<contender>/keys=<n>/<serial|parallel>
//
// as the hot-path rows are run: distinct keys, each used once before the
// timer, visited in a shuffled order; parallel is b.RunParallel.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, c := range SemaphoreContenders() {
		b.Run(c.Name, func(b *testing.B) {
			for _, row := range semaphoreRows {
				var s Semaphore
				var keys []string
				b.Run(row.String(), func(b *testing.B) {
					if s == nil { // built on the first b.N, kept for the others
						keys = hotpath.Keys(row.Keys)
						var err error
						if s, err = c.New(semaphoreSlots); err != nil {
							b.Fatal(err)
						}
						for _, k := range keys {
							if err := s.AcquireRelease(context.Background(), k, nil); err != nil {
								b.Fatal(err)
							}
						}
					}
					runAcquireRelease(b, s, keys, row.Parallel)
				})
				if s != nil {
					require.NoError(b, CloseSemaphore(s))
				}
			}
		})
	}
}

func runAcquireRelease(b *testing.B, s Semaphore, keys []string, parallel bool) {
	b.ReportAllocs()
	ctx := context.Background()
	if !parallel {
		i := 0
		for b.Loop() {
			if err := s.AcquireRelease(ctx, keys[i], nil); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		return
	}
	var seed atomic.Uint64
	var failed atomic.Bool
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(0x9E3779B9) % uint64(len(keys)))
		for pb.Next() {
			if s.AcquireRelease(ctx, keys[i], nil) != nil {
				failed.Store(true)
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	if failed.Load() {
		b.Fatal("an acquisition failed")
	}
}

// TestSemaphoresBound: every contender of BenchmarkAcquireRelease is a
// concurrency limit: 16 goroutines holding slots of 2 keys of 3 slots each
// never have more than 3 of a key at once, and reach 3.
func TestSemaphoresBound(t *testing.T) {
	for _, c := range SemaphoreContenders() {
		t.Run(c.Name, func(t *testing.T) {
			s, err := c.New(3)
			require.NoError(t, err)
			defer func() { require.NoError(t, CloseSemaphore(s)) }()
			var held, most [2]atomic.Int64
			var failed atomic.Int64
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					for i := range 200 {
						k := (g + i) % 2
						err := s.AcquireRelease(context.Background(), []string{"a", "b"}[k], func() {
							n := held[k].Add(1)
							for m := most[k].Load(); n > m && !most[k].CompareAndSwap(m, n); m = most[k].Load() {
							}
							time.Sleep(10 * time.Microsecond)
							held[k].Add(-1)
						})
						if err != nil {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.Zero(t, failed.Load(), "acquisitions that failed")
			require.Equal(t, int64(3), most[0].Load())
			require.Equal(t, int64(3), most[1].Load())
		})
	}
}
