package main

import (
	"fmt"
	"os"

	"github.com/keylimit/keylimit/benchmarks"
)

// contentionCase is one contention count: a quota, and how many goroutines
// ask how many times each.
type contentionCase struct {
	title      string
	quota      benchmarks.Quota
	goroutines int
	attempts   int
}

var contentionCases = []contentionCase{
	{"burst 100 per hour", benchmarks.HotKeyQuota, 64, 10_000},
	{"burst 1,000,000 per hour", benchmarks.DeepBurstQuota, 64, 20_000},
}

// contention is the outcome of one case: every round of every contender,
// or why a contender could not be built for the case's quota.
type contention struct {
	contentionCase
	rounds  map[string][]benchmarks.Admission
	refused map[string]error
}

// contendAll runs every case, rounds times, on every contender but the
// floor, each round on a new limiter.
func contendAll(rounds int) []contention {
	var out []contention
	for _, cc := range contentionCases {
		ct := contention{contentionCase: cc, rounds: make(map[string][]benchmarks.Admission), refused: make(map[string]error)}
		for _, c := range benchmarks.Contenders() {
			if c.Kind == benchmarks.Floor {
				continue
			}
			fmt.Fprintf(os.Stderr, "benchreport: contention, %s, %s\n", cc.title, c.Name)
			for range rounds {
				// Contend fails only if c cannot be built for the quota.
				a, err := benchmarks.Contend(c, cc.quota, cc.goroutines, cc.attempts)
				if err != nil {
					ct.refused[c.Name] = err
					break
				}
				ct.rounds[c.Name] = append(ct.rounds[c.Name], a)
			}
		}
		out = append(out, ct)
	}
	return out
}

// admissionSummary is what the rounds of one contender add up to.
type admissionSummary struct {
	minAdmitted, maxAdmitted int
	minBound, maxBound       int
	over                     int // the most admitted above the bound in a round
	under                    int // the most admitted below the burst in a round
	errors                   int64
}

func summarize(as []benchmarks.Admission, burst int) admissionSummary {
	s := admissionSummary{minAdmitted: as[0].Admitted, maxAdmitted: as[0].Admitted, minBound: as[0].Bound, maxBound: as[0].Bound}
	for _, a := range as {
		s.minAdmitted, s.maxAdmitted = min(s.minAdmitted, a.Admitted), max(s.maxAdmitted, a.Admitted)
		s.minBound, s.maxBound = min(s.minBound, a.Bound), max(s.maxBound, a.Bound)
		s.over = max(s.over, a.Admitted-a.Bound)
		s.under = max(s.under, burst-a.Admitted)
		s.errors += a.Errors
	}
	return s
}

// verdict says in words whether the rounds were exact.
func (s admissionSummary) verdict() string {
	v := ""
	add := func(f string, args ...any) {
		if v != "" {
			v += "; "
		}
		v += fmt.Sprintf(f, args...)
	}
	if s.over > 0 {
		add("**over-admits**, by up to %d", s.over)
	}
	if s.under > 0 {
		add("**under-admits**, by up to %d", s.under)
	}
	if s.errors == 1 {
		add("**1 call failed with an error**")
	} else if s.errors > 1 {
		add("**%d calls failed with an error**", s.errors)
	}
	if v == "" {
		return "exact"
	}
	return v
}
