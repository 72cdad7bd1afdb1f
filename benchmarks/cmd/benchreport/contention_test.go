package main

import (
	"testing"

	"github.com/keylimit/keylimit/benchmarks"
)

func TestVerdictNamesEveryWayToBeInexact(t *testing.T) {
	for _, tc := range []struct {
		rounds []benchmarks.Admission
		want   string
	}{
		{[]benchmarks.Admission{{Admitted: 100, Bound: 100}, {Admitted: 100, Bound: 101}}, "exact"},
		{[]benchmarks.Admission{{Admitted: 100, Bound: 100}, {Admitted: 104, Bound: 101}}, "**over-admits**, by up to 3"},
		{[]benchmarks.Admission{{Admitted: 97, Bound: 100}}, "**under-admits**, by up to 3"},
		{[]benchmarks.Admission{{Admitted: 100, Bound: 100, Errors: 5}, {Admitted: 100, Bound: 100, Errors: 2}}, "**7 calls failed with an error**"},
		{[]benchmarks.Admission{{Admitted: 102, Bound: 100, Errors: 1}}, "**over-admits**, by up to 2; **1 call failed with an error**"},
	} {
		if got := summarize(tc.rounds, 100).verdict(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.rounds, got, tc.want)
		}
	}
}
