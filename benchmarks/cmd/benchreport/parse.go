package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// result is one line of `go test -bench` output for BenchmarkAllow.
type result struct {
	limit     string // loose, tight
	row       string // keys=1M/parallel
	contender string
	procs     int // the -N suffix: GOMAXPROCS of the run
	round     int // 0 for the name's first line, 1 for its second, ...
	nsPerOp   float64
	allocs    float64
	bytes     float64
	admitted  float64 // the share of calls admitted
}

// parseBench reads BenchmarkAllow lines from `go test -bench` output, one or
// several runs concatenated. The i-th line of a name is round i: run.sh runs
// the whole suite once per round, so that the rows of one round ran close
// together in time and their ratios share the machine's mood.
func parseBench(r io.Reader) ([]result, error) {
	var out []result
	seen := make(map[string]int)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkAllow/") {
			continue
		}
		res, err := parseLine(f)
		if err != nil {
			return nil, fmt.Errorf("benchreport: line %d: %v", line, err)
		}
		res.round = seen[f[0]]
		seen[f[0]]++
		out = append(out, res)
	}
	return out, sc.Err()
}

// parseLine parses the fields of one line:
//
//	BenchmarkAllow/loose/keys=1/serial/floor-2  1000  39.5 ns/op  0 B/op  0 allocs/op
func parseLine(f []string) (result, error) {
	name, procs := f[0], 1
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil {
			name, procs = name[:i], p
		}
	}
	parts := strings.Split(strings.TrimPrefix(name, "BenchmarkAllow/"), "/")
	if len(parts) != 4 {
		return result{}, fmt.Errorf("name %q is not BenchmarkAllow/<limit>/keys=<n>/<mode>/<contender>", f[0])
	}
	res := result{limit: parts[0], row: parts[1] + "/" + parts[2], contender: parts[3], procs: procs}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return result{}, fmt.Errorf("value %q: %v", f[i], err)
		}
		switch f[i+1] {
		case "ns/op":
			res.nsPerOp = v
		case "allocs/op":
			res.allocs = v
		case "B/op":
			res.bytes = v
		case "admitted/op":
			res.admitted = v
		}
	}
	return res, nil
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread returns the largest distance of xs from m, as a fraction of m.
func spread(xs []float64, m float64) float64 {
	d := 0.0
	for _, x := range xs {
		d = max(d, abs(x-m))
	}
	if m == 0 {
		return 0
	}
	return d / m
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
