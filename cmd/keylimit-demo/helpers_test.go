package main

import (
	"bytes"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// tourOf runs the scenes whose name contains only on a mock clock, so that
// every number they print is exact, and returns what the tour printed.
func tourOf(t *testing.T, only string) string {
	t.Helper()
	real := demoClock
	demoClock = clock.NewMock()
	t.Cleanup(func() { demoClock = real })
	var out bytes.Buffer
	require.NoError(t, tour(&out, only), "tour %q", only)
	return out.String()
}

// oneScene is what the tour prints around a single scene's output.
func oneScene(title, body string) string {
	return "keylimit-demo: 1 scene of rate limiting, in real time; the tour ends by itself.\n" +
		"\n=== 1/1 " + title + "\n\n" + body + "\ntour complete: 1 scene\n"
}
