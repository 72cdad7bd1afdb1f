package benchmarks

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
)

// Every contender runs the rows of the one hot-path harness
// (internal/hotpath), which says how a row is run:
//
//	BenchmarkAllow/<contender>/keys=<n>/<serial|parallel>
//
// BenchmarkAllow is under hotpath.Loose, which admits nearly every call;
// BenchmarkAllowRefused under hotpath.Tight, which refuses every call
// measured; BenchmarkAllowRefusedRefilling under hotpath.Refilling, which
// refuses nearly every call but refills, 10 a second. Each row reports
// admitted/op, the share of calls admitted.

func BenchmarkAllow(b *testing.B) { runAllow(b, hotpath.Loose) }

func BenchmarkAllowRefused(b *testing.B) { runAllow(b, hotpath.Tight) }

func BenchmarkAllowRefusedRefilling(b *testing.B) { runAllow(b, hotpath.Refilling) }

func runAllow(b *testing.B, l hotpath.Limit) {
	for _, c := range Contenders() {
		hotpath.Run(b, c.Name, l, func(l hotpath.Limit) (hotpath.Allower, error) {
			return c.New(Quota{Burst: l.Events, Period: l.Period})
		})
	}
}

// BenchmarkMemory reports the heap each contender keeps per key, in B/key,
// for b.N keys each used once (HeapPerKey): held, under a limit that keeps
// every key; and, for the contenders that evict, idle, once the keys have
// gone idle and the contender has had time to evict them
// (HeapPerKeyOnceIdle). Its time is not a figure of interest: set b.N with
// -benchtime, as in
//
//	go test -run '^$' -bench '^BenchmarkMemory$' -benchtime=1000000x
func BenchmarkMemory(b *testing.B) {
	for _, c := range Contenders() {
		b.Run(c.Name+"/held", func(b *testing.B) {
			perKey, err := HeapPerKey(c, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(0, "ns/op") // 0 leaves the time out
			b.ReportMetric(perKey, "B/key")
		})
		if !c.Evicts {
			continue
		}
		b.Run(c.Name+"/idle", func(b *testing.B) {
			perKey, _, err := HeapPerKeyOnceIdle(c, b.N, 50*time.Millisecond, 20*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(perKey, "B/key")
		})
	}
}
