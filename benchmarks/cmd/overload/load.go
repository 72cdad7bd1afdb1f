package main

import (
	"math/rand/v2"
	"time"
)

// arrival is one request of the open-loop load: when it is sent, counted
// from the start of the run, by which tenant, and whether it is critical.
type arrival struct {
	at       time.Duration
	tenant   int
	critical bool
}

// loadSpec is the load a run sends, whatever the server answers: arrivals
// never wait for the answers to earlier ones.
type loadSpec struct {
	rate     float64       // arrivals a second, all tenants together
	duration time.Duration // arrivals are sent in [0, duration)
	weights  []int         // each tenant's share of the arrivals: {10, 1, 1, 1}
	critical int           // critical arrivals per 1000
	poisson  bool          // exponential gaps of mean 1/rate, else gaps of exactly 1/rate
	seed     uint64        // of the Poisson gaps
}

// schedule returns the arrivals of s in time order. Tenants take turns by
// smooth weighted round robin, so that in every run of sum(weights)
// arrivals each tenant has exactly its weight, spread out; the i-th
// arrival (from 0) is critical when ⌊(i+1)·critical/1000⌋ passes
// ⌊i·critical/1000⌋, so that the first n arrivals hold exactly
// ⌊n·critical/1000⌋ critical ones, evenly spaced. With poisson the times are random and the order of
// tenants and critical arrivals the same.
func (s loadSpec) schedule() []arrival {
	if s.rate <= 0 || s.duration <= 0 || len(s.weights) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.seed, 0x6f76_6572_6c6f_6164))
	total := 0
	for _, w := range s.weights {
		total += w
	}
	current := make([]int, len(s.weights))
	gap := float64(time.Second) / s.rate
	out := make([]arrival, 0, int(s.duration.Seconds()*s.rate)+1)
	var at float64 // ns
	for i := 0; ; i++ {
		if s.poisson {
			at += rng.ExpFloat64() * gap
			if i == 0 {
				at = 0 // the first arrival at the start, as with fixed gaps
			}
		} else {
			at = float64(i) * gap
		}
		if time.Duration(at) >= s.duration {
			return out
		}
		// Smooth weighted round robin: each tenant gains its weight, the
		// one with the most goes and pays the total.
		best := 0
		for t, w := range s.weights {
			current[t] += w
			if current[t] > current[best] {
				best = t
			}
		}
		current[best] -= total
		crit := (i+1)*s.critical/1000 > i*s.critical/1000
		out = append(out, arrival{at: time.Duration(at), tenant: best, critical: crit})
	}
}
