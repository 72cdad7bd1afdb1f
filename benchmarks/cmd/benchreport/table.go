package main

import (
	"math"
	"slices"
)

// speed is the BenchmarkAllow results of one GOMAXPROCS, by cell.
type speed struct {
	procs      int
	rounds     int
	limits     []string // in the order the run listed them
	rows       []string
	contenders []string
	cells      map[cellKey][]result // by round
}

type cellKey struct{ limit, row, contender string }

// bySpeed groups results by their GOMAXPROCS, in the order they appear.
func bySpeed(results []result) []*speed {
	var out []*speed
	for _, r := range results {
		i := slices.IndexFunc(out, func(s *speed) bool { return s.procs == r.procs })
		if i < 0 {
			out = append(out, &speed{procs: r.procs, cells: make(map[cellKey][]result)})
			i = len(out) - 1
		}
		s := out[i]
		s.limits = appendNew(s.limits, r.limit)
		s.rows = appendNew(s.rows, r.row)
		s.contenders = appendNew(s.contenders, r.contender)
		k := cellKey{r.limit, r.row, r.contender}
		s.cells[k] = append(s.cells[k], r)
		s.rounds = max(s.rounds, r.round+1)
	}
	return out
}

func appendNew(xs []string, x string) []string {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

// values returns what f picks from each round of a cell.
func (s *speed) values(k cellKey, f func(result) float64) []float64 {
	var xs []float64
	for _, r := range s.cells[k] {
		xs = append(xs, f(r))
	}
	return xs
}

func nsPerOp(r result) float64  { return r.nsPerOp }
func allocs(r result) float64   { return r.allocs }
func admitted(r result) float64 { return r.admitted }

// median returns a cell's median ns/op, or NaN if it has none.
func (s *speed) median(limit, row, c string) float64 {
	xs := s.values(cellKey{limit, row, c}, nsPerOp)
	if len(xs) == 0 {
		return math.NaN()
	}
	return median(xs)
}

// round returns the ns/op of a cell in one round, or NaN if it has none.
func (s *speed) round(k cellKey, round int) float64 {
	for _, r := range s.cells[k] {
		if r.round == round {
			return r.nsPerOp
		}
	}
	return math.NaN()
}

// ratio is the median over rounds of num's ns/op over den's, both taken
// from the same round: a ratio of two rows measured minutes apart on a
// shared machine would say more about the machine than about the code.
// num and den pick a cell's ns/op in a round.
func (s *speed) ratio(num, den func(round int) float64) float64 {
	var rs []float64
	for round := range s.rounds {
		n, d := num(round), den(round)
		if !math.IsNaN(n) && !math.IsNaN(d) && d > 0 {
			rs = append(rs, n/d)
		}
	}
	if len(rs) == 0 {
		return math.NaN()
	}
	return median(rs)
}

// bestOf returns, for one limit and row, the ns/op in a round of the
// fastest of cs in that round.
func (s *speed) bestOf(limit, row string, cs []string) func(round int) float64 {
	return func(round int) float64 {
		best := math.NaN()
		for _, c := range cs {
			if v := s.round(cellKey{limit, row, c}, round); !math.IsNaN(v) && !(v >= best) {
				best = v
			}
		}
		return best
	}
}

// fastest returns which of cs has the lowest median ns/op on a row.
func (s *speed) fastest(limit, row string, cs []string) string {
	best, bestNs := "", math.Inf(1)
	for _, c := range cs {
		if m := s.median(limit, row, c); m < bestNs {
			best, bestNs = c, m
		}
	}
	return best
}

// of returns a cell's ns/op in a round, as a function of the round.
func (s *speed) of(limit, row, c string) func(round int) float64 {
	return func(round int) float64 { return s.round(cellKey{limit, row, c}, round) }
}
