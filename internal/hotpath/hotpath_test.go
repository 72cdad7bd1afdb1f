package hotpath

import (
	"flag"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRowNamesReadAsATable(t *testing.T) {
	var names []string
	for _, r := range Rows {
		names = append(names, r.String())
	}
	require.Equal(t, []string{"keys=1/serial", "keys=1/parallel", "keys=1e4/parallel", "keys=1e6/parallel"}, names)
	require.Equal(t, "keys=10/serial", Row{Keys: 10}.String(), "one zero is written out")
	require.Equal(t, "keys=25e4/parallel", Row{Keys: 250_000, Parallel: true}.String())
}

// fake admits every call or none, and marks each key it is asked about.
type fake struct {
	admit  bool
	limit  Limit
	index  map[string]int
	seen   []atomic.Bool
	closed bool
}

func newFake(admit bool, keys []string) *fake {
	f := &fake{admit: admit, index: make(map[string]int), seen: make([]atomic.Bool, len(keys))}
	for i, k := range keys {
		f.index[k] = i
	}
	return f
}

func (f *fake) Allow(key string) bool {
	f.seen[f.index[key]].Store(true)
	return f.admit
}

func (f *fake) Close() error {
	f.closed = true
	return nil
}

// benchmark runs fn as testing.Benchmark does, with b.N = n on the run it
// reports.
func benchmark(t *testing.T, n string, fn func(b *testing.B)) testing.BenchmarkResult {
	t.Helper()
	old := flag.Lookup("test.benchtime").Value.String()
	require.NoError(t, flag.Set("test.benchtime", n))
	defer flag.Set("test.benchtime", old)
	return testing.Benchmark(fn)
}

// TestRunRowReportsTheShareAdmitted checks what a row reports, serial and
// parallel: b.N calls that visit every key, admitted/op as the share the
// limiter admitted, and no allocation of its own.
func TestRunRowReportsTheShareAdmitted(t *testing.T) {
	keys := Keys(10)
	for _, parallel := range []bool{false, true} {
		for _, admit := range []bool{true, false} {
			f := newFake(admit, keys)
			r := benchmark(t, "1000x", func(b *testing.B) { RunRow(b, f, keys, parallel) })
			require.Equal(t, 1000, r.N, "parallel %v: b.N", parallel)
			want := 0.0
			if admit {
				want = 1
			}
			require.Equal(t, want, r.Extra["admitted/op"], "parallel %v, admit %v: admitted/op", parallel, admit)
			require.Equal(t, int64(0), r.AllocsPerOp(), "parallel %v: allocs/op", parallel)
			for i := range f.seen {
				require.True(t, f.seen[i].Load(), "parallel %v: key %d never asked", parallel, i)
			}
		}
	}
}

// tally counts the distinct keys it is asked about, and whether it was
// closed.
type tally struct {
	limit  Limit
	mu     sync.Mutex // protects keys
	keys   map[string]bool
	closed bool
}

func (t *tally) Allow(key string) bool {
	t.mu.Lock()
	t.keys[key] = true
	t.mu.Unlock()
	return true
}

func (t *tally) Close() error {
	t.closed = true
	return nil
}

// TestRunBuildsEachRowsLimiterOnceAndClosesIt checks Run under -short (set
// here, to leave out the million keys): one limiter per row, built for the
// limit given, asked about each of the row's keys, and closed when the row
// is done.
func TestRunBuildsEachRowsLimiterOnceAndClosesIt(t *testing.T) {
	old := flag.Lookup("test.short").Value.String()
	require.NoError(t, flag.Set("test.short", "true"))
	defer flag.Set("test.short", old)
	var built []*tally
	benchmark(t, "100x", func(b *testing.B) {
		Run(b, "tally", Tight, func(l Limit) (Allower, error) {
			built = append(built, &tally{limit: l, keys: make(map[string]bool)})
			return built[len(built)-1], nil
		})
	})
	require.Len(t, built, len(Rows)-1, "limiters built: one per row, the million keys' row left out")
	for i, lim := range built {
		require.Equal(t, Tight, lim.limit, "row %d: the limit", i)
		require.Len(t, lim.keys, Rows[i].Keys, "row %d: distinct keys asked", i)
		require.True(t, lim.closed, "row %d: closed", i)
	}
}

// countingFake refuses every call and counts them.
type countingFake struct {
	limit Limit
	calls atomic.Int64
}

func (f *countingFake) Allow(string) bool {
	f.calls.Add(1)
	return false
}

// TestRunSpendsARefillingLimitsOneKey checks Run under Refilling: the two
// one-key rows only, and the key asked Events times before a run of 100
// calls measured. (The testing package may first run a row with b.N = 1,
// spending the key before it too: so "at least".)
func TestRunSpendsARefillingLimitsOneKey(t *testing.T) {
	var built []*countingFake
	benchmark(t, "100x", func(b *testing.B) {
		Run(b, "counting", Refilling, func(l Limit) (Allower, error) {
			built = append(built, &countingFake{limit: l})
			return built[len(built)-1], nil
		})
	})
	require.Len(t, built, 2, "limiters built: keys=1 serial and parallel")
	for i, f := range built {
		require.Equal(t, Refilling, f.limit, "row %d: the limit", i)
		calls := f.calls.Load() - 1 // the call that adds the key
		require.GreaterOrEqual(t, calls, int64(Refilling.Events+100), "row %d: calls", i)
	}
}

func TestFloorCreatesAWordPerKeyAndWinsUncontended(t *testing.T) {
	f := NewFloor()
	require.True(t, f.Allow("a"), "a new key")
	require.True(t, f.Allow("a"), "a held key")
	require.True(t, f.Allow("b"), "another key")
	require.Equal(t, 2, f.m.Size(), "words")
}

// TestKeysAreDistinctSixteenBytes checks the first 100,000 keys; the rest
// are distinct by construction (an odd multiplier is a bijection of the
// 64-bit integers, and 16 hex digits write all 64 bits).
func TestKeysAreDistinctSixteenBytes(t *testing.T) {
	const n = 100_000
	keys := Keys(n)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		require.Len(t, k, KeyLen, "key %q", k)
		seen[k] = true
	}
	require.Len(t, seen, n, "distinct keys")
}

func TestKeysAreShuffledTheSameWayEachTime(t *testing.T) {
	a, b := Keys(1000), Keys(1000)
	require.Equal(t, a, b, "two calls")
	inOrder := 0
	for i := range a {
		if a[i] == Key(i) {
			inOrder++
		}
	}
	require.LessOrEqual(t, inOrder, 10, "keys of 1000 in insertion order")
}

func TestKeyIsSixteenHexDigitsOfAProduct(t *testing.T) {
	require.Equal(t, "9e3779b97f4a7c15", Key(1), "1 × 0x9E3779B97F4A7C15")
	require.Equal(t, "0000000000000000", Key(0))
}
