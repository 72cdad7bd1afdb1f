package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestTourFleet: three in-memory instances admit three times the limit, and
// the scene says how to run the Redis fleet demo.
func TestTourFleet(t *testing.T) {
	mockTime(t)
	var out bytes.Buffer
	if err := tour(&out, "fleet"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"30 admitted, 3x the limit", fleetRunCommand} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
}
