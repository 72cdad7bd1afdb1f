package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/benbjohnson/clock"
)

// mockTime runs the scenes on a mock clock for the test's duration, so that
// the numbers they print are exact.
func mockTime(t *testing.T) {
	real := demoClock
	demoClock = clock.NewMock()
	t.Cleanup(func() { demoClock = real })
}

// TestTourBucket runs the bucket scene and checks the counts it prints.
func TestTourBucket(t *testing.T) {
	mockTime(t)
	var out bytes.Buffer
	if err := tour(&out, "bucket"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []struct {
		text  string
		count int
	}{
		{"5 accepted, 3 refused", 3},
		{"remaining=3 reset-after=2s", 3},
		{"last: remaining=0 retry-after=1s reset-after=5s", 6},
		{"3 accepted, 5 refused", 3},
		{"tour complete: 1 scenes", 1},
	} {
		if n := strings.Count(got, want.text); n != want.count {
			t.Errorf("%q appears %d times, want %d; output:\n%s", want.text, n, want.count, got)
		}
	}
}

func TestTourUnknownScene(t *testing.T) {
	if err := tour(&bytes.Buffer{}, "no-such-scene"); err == nil {
		t.Fatal("tour of an unknown scene returned no error")
	}
}

// TestTourBoundary runs the boundary scene and checks the chart and counts
// it prints.
func TestTourBoundary(t *testing.T) {
	mockTime(t)
	var out bytes.Buffer
	if err := tour(&out, "boundary"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []struct {
		text  string
		count int
	}{
		{"  -500ms    ####     ####     ####\n", 1},
		{"  -300ms    ##..     ##..     ##..\n", 1},
		{"  -100ms    ....     ....     ....\n", 1},
		{"  ---------- window boundary ----------\n  +0ms ", 1},
		{"  +0ms      ####     ....     ....\n", 1},
		{"  +100ms    ####     ....     #...\n", 1},
		{"  +200ms    ##..     ....     #...\n", 1},
		{"  +400ms    ....     ....     #...\n", 1},
		{"fixed:   20 admitted", 1},
		{"sliding: 10 admitted; after the boundary it answers retry-after 500ms", 1},
		{"counter: 14 admitted", 1},
		{"tour complete: 1 scenes", 1},
	} {
		if n := strings.Count(got, want.text); n != want.count {
			t.Errorf("%q appears %d times, want %d; output:\n%s", want.text, n, want.count, got)
		}
	}
}
