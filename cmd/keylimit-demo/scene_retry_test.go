package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestTourRetry runs the retry scene on the mock clock, where every number
// it prints is exact. The misbehaving loop alone is refused twice for each
// of the 5 calls past the partner's burst (tries at +0 and +100 ms, passes
// at +200 ms). Through a Transport it is never refused: the partner's 5th
// answer says RateLimit r=0;t=1, so the Transport holds the 6th call until
// the bucket is full again at 1 s; with the Transport's own 5/s the calls
// go evenly 200 ms apart.
func TestTourRetry(t *testing.T) {
	mockTime(t)
	var out bytes.Buffer
	if err := tour(&out, "retry"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"without the Transport:                             10 calls in 1s; the partner refused 10 requests\n",
		"with the Transport, reading the partner's fields:  10 calls in 1s; the partner refused 0 requests\n",
		"with the Transport, and 5/s of its own:            10 calls in 1.8s; the partner refused 0 requests\n",
		"tour complete: 1 scenes",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q; output:\n%s", want, got)
		}
	}
}
