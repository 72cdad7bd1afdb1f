package adaptive_test

import (
	"strconv"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
)

// BenchmarkAcquireRelease is a TryAcquire and a Release of one slot, a
// Limiter's beside a keylimit.Concurrency's, on keys held by one call at a
// time:
//
//	go test -run '^$' -bench '^BenchmarkAcquireRelease' -cpu 1,2 ./adaptive
//
// Names read as BenchmarkAcquireRelease/<limiter>/keys=<n>/<serial|parallel>.
// A Limiter reads the clock twice a hold (its latency) and writes the
// overall counts, which a Concurrency does not have.
func BenchmarkAcquireRelease(b *testing.B) {
	type acquirer interface {
		TryAcquire(key string, n int) (keylimit.Permit, keylimit.Result)
		Close() error
	}
	limiters := []struct {
		name string
		new  func() (acquirer, error)
	}{
		{"concurrency", func() (acquirer, error) { return keylimit.NewConcurrency[string](1 << 16) }},
		{"adaptive-gradient", func() (acquirer, error) {
			return adaptive.New[string](adaptive.Gradient(1<<16, 1<<16))
		}},
		{"adaptive-aimd", func() (acquirer, error) { return adaptive.New[string](adaptive.AIMD(1<<16, 1<<16)) }},
	}
	for _, l := range limiters {
		for _, nkeys := range []int{1, 10000} {
			keys := make([]string, nkeys)
			for i := range keys {
				keys[i] = "key-" + strconv.Itoa(i)
			}
			lim, err := l.new()
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				p, _ := lim.TryAcquire(k, 1)
				p.Release()
			}
			name := l.name + "/keys=" + strconv.Itoa(nkeys)
			b.Run(name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					p, _ := lim.TryAcquire(keys[i%nkeys], 1)
					p.Release()
					i++
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						p, _ := lim.TryAcquire(keys[i%nkeys], 1)
						p.Release()
						i += 7
					}
				})
			})
			lim.Close()
		}
	}
}
