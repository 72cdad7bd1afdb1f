package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTourUnknownScene(t *testing.T) {
	var out bytes.Buffer
	require.EqualError(t, tour(&out, "no-such-scene"), `no scene matches "no-such-scene"`)
	require.Empty(t, out.String(), "output of a tour that runs nothing")
}

// TestTourSaysWhatComes: the first line says how many scenes run, and each
// title says which of them it is.
func TestTourSaysWhatComes(t *testing.T) {
	got := tourOf(t, "")
	first, _, _ := strings.Cut(got, "\n")
	require.Equal(t, "keylimit-demo: 7 scenes of rate limiting, in real time; the tour ends by itself.", first, "first line")
	for _, title := range []string{
		"=== 1/7 Three users", "=== 2/7 The window boundary", "=== 3/7 HTTP middleware", "=== 4/7 A retry loop",
		"=== 5/7 gRPC both ways", "=== 6/7 What operators see", "=== 7/7 A fleet",
	} {
		require.Equal(t, 1, strings.Count(got, "\n"+title), "title %q", title)
	}
	require.True(t, strings.HasSuffix(got, "\ntour complete: 7 scenes\n"), "last line; output:\n%s", got)
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 requests", 1: "1 request", 2: "2 requests"} {
		require.Equal(t, want, plural(n, "request"), "plural(%d)", n)
	}
}

func TestOverBy(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{9, "within 10/s"}, {10, "within 10/s"}, {14, "40% over 10/s"}, {20, "100% over 10/s"}} {
		require.Equal(t, c.want, overBy(c.n, 10, "s"), "overBy(%d, 10)", c.n)
	}
}
