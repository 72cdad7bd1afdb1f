package main

import (
	"math"
	"strings"
	"testing"
)

// Two rounds of two rows, as run.sh concatenates them: headers, PASS and ok
// lines between, a -2 suffix for GOMAXPROCS.
const twoRounds = `goos: linux
goarch: amd64
pkg: github.com/keylimit/keylimit/benchmarks
BenchmarkAllow/loose/keys=1/serial/floor-2         	30000000	        40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/keylimit-bucket-2         	30000000	        44.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/xtime-rwmutex-2         	30000000	        88.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/ulule-memory-2         	30000000	        220 ns/op	       32 B/op	       2 allocs/op
PASS
ok  	github.com/keylimit/keylimit/benchmarks	20.1s
goos: linux
BenchmarkAllow/loose/keys=1/serial/floor-2         	30000000	        80.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/keylimit-bucket-2         	30000000	        96.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/xtime-rwmutex-2         	30000000	        240 ns/op	       0 B/op	       0 allocs/op
BenchmarkAllow/loose/keys=1/serial/ulule-memory-2         	30000000	        192 ns/op	       32 B/op	       2 allocs/op
PASS
`

func TestParseBenchNumbersRounds(t *testing.T) {
	rs, err := parseBench(strings.NewReader(twoRounds))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 8 {
		t.Fatalf("%d results, want 8", len(rs))
	}
	want := result{limit: "loose", row: "keys=1/serial", contender: "ulule-memory", procs: 2, round: 1, nsPerOp: 192, allocs: 2, bytes: 32}
	if rs[7] != want {
		t.Errorf("last result %+v, want %+v", rs[7], want)
	}
	if rs[0].round != 0 || rs[4].round != 1 {
		t.Errorf("rounds %d and %d, want 0 and 1", rs[0].round, rs[4].round)
	}
}

func TestParseBenchRejectsAnotherShapeOfName(t *testing.T) {
	_, err := parseBench(strings.NewReader("BenchmarkAllow/bucket/keys=1-2  100  3.0 ns/op\n"))
	if err == nil {
		t.Fatal("a name without limit/keys/mode/contender parsed")
	}
}

// The ratios are taken within a round, then the median over rounds: here
// keylimit is 1.1× and 1.2× the floor, and the fastest peer (xtime in round
// 0, ulule in round 1) is 2.0× and 2.0× keylimit's time. A ratio of medians
// would say 1.17 and 2.34 instead.
func TestRatiosAreWithinRounds(t *testing.T) {
	rs, err := parseBench(strings.NewReader(twoRounds))
	if err != nil {
		t.Fatal(err)
	}
	s := bySpeed(rs)[0]
	if s.procs != 2 || s.rounds != 2 {
		t.Fatalf("procs %d, rounds %d; want 2, 2", s.procs, s.rounds)
	}
	const limit, row = "loose", "keys=1/serial"
	toFloor := s.ratio(s.of(limit, row, "keylimit-bucket"), s.of(limit, row, "floor"))
	if math.Abs(toFloor-1.15) > 1e-9 {
		t.Errorf("keylimit ÷ floor = %v, want 1.15 (median of 1.1 and 1.2)", toFloor)
	}
	peers := []string{"xtime-rwmutex", "ulule-memory"}
	toPeer := s.ratio(s.bestOf(limit, row, peers), s.of(limit, row, "keylimit-bucket"))
	if math.Abs(toPeer-2.0) > 1e-9 {
		t.Errorf("best peer ÷ keylimit = %v, want 2.0", toPeer)
	}
	if got := s.fastest(limit, row, peers); got != "xtime-rwmutex" {
		t.Errorf("fastest peer by median: %s, want xtime-rwmutex (164 against 206)", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
