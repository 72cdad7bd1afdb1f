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

// TestTourHTTP runs the HTTP scene, a real server and client on loopback,
// on the mock clock, and checks its output exactly.
func TestTourHTTP(t *testing.T) {
	mockTime(t)
	var out bytes.Buffer
	if err := tour(&out, "http"); err != nil {
		t.Fatal(err)
	}
	round := func(codes, first, last string) string {
		var b strings.Builder
		for _, u := range []string{"alice   ", "bob     ", "charlie "} {
			b.WriteString("  " + u + " " + codes + "\n")
			b.WriteString("           first: RateLimit: " + first + "\n")
			b.WriteString("           last:  RateLimit: " + last + "\n")
		}
		return b.String()
	}
	want := `
=== HTTP middleware over loopback: 429, Retry-After and the RateLimit fields

server on 127.0.0.1, a free port; keyed by client IP, 127.0.0.1 trusted as the proxy
charlie forges X-Forwarded-For (6.6.6.n, ...) and rotates his IPv6 address in 2001:db8:c::/64

8 rapid requests each:
` + round("200 200 200 200 200 429 429 429", `"burst";r=4;t=1`, `"burst";r=0;t=5  Retry-After: 1`) + `
every response: RateLimit-Policy: "burst";q=5;w=5
a 429's body: {"error":"rate limit exceeded","retry_after_seconds":1,"policy":"burst","limit":5,"remaining":0}

waiting 3s: one token a second comes back...

8 rapid requests each again:
` + round("200 200 200 429 429 429 429 429", `"burst";r=2;t=3`, `"burst";r=0;t=5  Retry-After: 1`) + `
tour complete: 1 scenes
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
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
