package benchmarks

// The helpers of the package's tests: every function or type that more than
// one test file uses lives here; what one file alone uses sits beside its
// tests.

// peersAndKeylimit returns every contender but the floor, which limits
// nothing.
func peersAndKeylimit() []Contender {
	var cs []Contender
	for _, c := range Contenders() {
		if c.Kind != Floor {
			cs = append(cs, c)
		}
	}
	return cs
}
