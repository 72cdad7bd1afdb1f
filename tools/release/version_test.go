package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSetVersionMovesEveryRequireOfOurs(t *testing.T) {
	tr := mustTree(t, goodTree())
	require.NoError(t, setVersion(tr, "v0.2.0"), "setVersion")

	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(tr.Root, name))
		require.NoError(t, err, "read %s", name)
		return string(data)
	}
	require.Equal(t, "v0.2.0\n", read("VERSION"), "VERSION")
	require.Equal(t, "module example.com/lib/sub\n\ngo 1.26.0\n\n"+
		"require example.com/lib v0.2.0 // the root\n\nreplace example.com/lib => ../\n", read("sub/go.mod"), "sub/go.mod, its comment and replace kept")
	require.Equal(t, goodTree()["go.mod"], read("go.mod"), "the root's go.mod, which requires none of ours")

	again, err := newTree(tr.Root, tr.Files)
	require.NoError(t, err, "reloading")
	require.Nil(t, check(again), "problems after set-version")
}

func TestSetVersionRefusesAShortVersion(t *testing.T) {
	tr := mustTree(t, goodTree())
	require.EqualError(t, setVersion(tr, "v0.2"), `release: set-version: "v0.2" is not a full semantic version such as v0.1.0`, "setVersion")
	data, err := os.ReadFile(filepath.Join(tr.Root, "VERSION"))
	require.NoError(t, err, "read VERSION")
	require.Equal(t, "v0.1.0\n", string(data), "VERSION, unchanged")
}
