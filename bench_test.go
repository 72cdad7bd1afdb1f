package keylimit_test

import (
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
)

// The hot path beside the floor, through the one harness (internal/hotpath,
// which says how a row is run); the benchmarks module runs the same rows
// with other Go rate limiters beside these:
//
//	go test -run '^$' -bench '^BenchmarkAllow' -cpu 1,2 .
//
// Names read as a table, BenchmarkAllow/<limiter>/keys=<n>/<serial|parallel>:
// BenchmarkAllow under a limit that admits nearly every call,
// BenchmarkAllowRefused under one that refuses every call measured.

// benchLimiters are the limiters the hot-path benchmarks run: the floor,
// then keylimit's four types, each called through hotpath.Allower.
var benchLimiters = []struct {
	name string
	new  func(hotpath.Limit) (hotpath.Allower, error)
}{
	{"floor", func(hotpath.Limit) (hotpath.Allower, error) { return hotpath.NewFloor(), nil }},
	{"keylimit-bucket", benchNew(keylimit.NewTokenBucket[string])},
	{"keylimit-fixedwindow", benchNew(keylimit.NewFixedWindow[string])},
	{"keylimit-slidingwindow", benchNew(keylimit.NewSlidingWindow[string])},
	{"keylimit-slidingcounter", benchNew(keylimit.NewSlidingCounter[string])},
}

// benchNew adapts a keylimit constructor to the harness: Events per Period.
func benchNew[L hotpath.Allower](ctor func(keylimit.Limit, ...keylimit.Option) (L, error)) func(hotpath.Limit) (hotpath.Allower, error) {
	return func(l hotpath.Limit) (hotpath.Allower, error) {
		return ctor(keylimit.Per(l.Events, l.Period))
	}
}

func BenchmarkAllow(b *testing.B) {
	for _, bl := range benchLimiters {
		hotpath.Run(b, bl.name, hotpath.Loose, bl.new)
	}
}

func BenchmarkAllowRefused(b *testing.B) {
	for _, bl := range benchLimiters {
		hotpath.Run(b, bl.name, hotpath.Tight, bl.new)
	}
}

// benchKeys and runAllow are the harness's keys and row, for the benchmarks
// of this package that measure something else (Allow during eviction).
func benchKeys(n int) []string { return hotpath.Keys(n) }

func runAllow(b *testing.B, lim hotpath.Allower, keys []string, mode string) {
	hotpath.RunRow(b, lim, keys, mode == "parallel")
}
