package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// tourOf runs the scenes whose name contains only on a mock clock, so that
// every number they print is exact, and returns what the tour printed.
func tourOf(t *testing.T, only string) string {
	t.Helper()
	onClock(t, clock.NewMock())
	var out bytes.Buffer
	require.NoError(t, tour(&out, only), "tour %q", only)
	return out.String()
}

// oneScene is what the tour prints around a single scene's output.
func oneScene(title, body string) string {
	return "keylimit-demo: 1 scene of rate limiting, in real time; the tour ends by itself.\n" +
		"\n=== 1/1 " + title + "\n\n" + body + "\ntour complete: 1 scene\n"
}

// tempModule writes a Go module of commands into a new directory and returns
// its path: each entry of mains is a package directory ("ok") and the body of
// its main.go.
func tempModule(t *testing.T, mains map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/demo\n\ngo 1.26.0\n"), 0o644))
	for pkg, body := range mains {
		require.NoError(t, os.Mkdir(filepath.Join(dir, pkg), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, pkg, "main.go"), []byte(body), 0o644))
	}
	return dir
}

// onClock runs the rest of the test with c as demoClock: a mock, or the
// real clock, as the tour has outside tests.
func onClock(t *testing.T, c clock.Clock) {
	real := demoClock
	demoClock = c
	t.Cleanup(func() { demoClock = real })
}
