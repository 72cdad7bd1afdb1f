package benchmarks

import (
	"testing"
	"time"
)

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

// countAllowed builds c for q and returns how many of n calls on one key it
// admits, from one goroutine.
func countAllowed(t *testing.T, c Contender, q Quota, n int) int {
	t.Helper()
	lim, err := c.New(q)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	defer func() {
		if err := Close(lim); err != nil {
			t.Errorf("%s: Close: %v", c.Name, err)
		}
	}()
	allowed := 0
	for range n {
		if lim.Allow("0123456789abcdef") {
			allowed++
		}
	}
	if e, ok := lim.(Errors); ok && e.Errors() != 0 {
		t.Errorf("%s: %d errors from one goroutine", c.Name, e.Errors())
	}
	return allowed
}

// TestContendersKeepTheirQuota checks that every contender is built from a
// Quota the way the tables assume, one goroutine at a time: the loose limit
// admits everything, the tight one exactly one event, and the hot-key quota
// exactly its burst. A wrapper that mistranslated a quota (throttled's burst
// is MaxBurst+1, juju takes a rate) would fail here.
func TestContendersKeepTheirQuota(t *testing.T) {
	const n = 1000
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			for _, bl := range benchLimits {
				want := n
				if bl.name == "tight" {
					want = 1
				}
				if got := countAllowed(t, c, bl.quota, n); got != want {
					t.Errorf("%s limit: %d of %d calls admitted, want %d", bl.name, got, n, want)
				}
			}
			if got, want := countAllowed(t, c, HotKeyQuota, n), HotKeyQuota.Burst; got != want {
				t.Errorf("hot-key quota: %d of %d calls admitted, want %d", got, n, want)
			}
		})
	}
}

// TestContendersKeepKeysApart checks that each contender limits keys
// separately: spending one key's quota leaves another's whole.
func TestContendersKeepKeysApart(t *testing.T) {
	for _, c := range peersAndKeylimit() {
		t.Run(c.Name, func(t *testing.T) {
			lim, err := c.New(Quota{Burst: 1, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer Close(lim)
			keys := Keys(100)
			for _, k := range keys {
				if !lim.Allow(k) {
					t.Fatalf("first call on key %q refused", k)
				}
			}
			for _, k := range keys {
				if lim.Allow(k) {
					t.Fatalf("second call on key %q admitted", k)
				}
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, c := range Contenders() {
		got, err := Lookup(c.Name)
		if err != nil || got.Name != c.Name {
			t.Errorf("Lookup(%q) = %q, %v", c.Name, got.Name, err)
		}
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error(`Lookup("nope") found a contender`)
	}
}
