package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteProxyServesEachPublishedModule(t *testing.T) {
	tr := mustTree(t, goodTree())
	out := filepath.Join(t.TempDir(), "proxy")
	mods, err := writeProxy(tr, out)
	require.NoError(t, err, "writeProxy")
	require.Equal(t, []string{".", "sub"}, dirs(mods), "modules written")

	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(name)))
		require.NoError(t, err, "read %s", name)
		return string(data)
	}
	require.Equal(t, "v0.1.0\n", read("example.com/lib/@v/list"), "the root's list")
	require.Contains(t, read("example.com/lib/@v/v0.1.0.info"), `"Version":"v0.1.0"`, "the root's info")
	require.Equal(t, goodTree()["sub/go.mod"], read("example.com/lib/sub/@v/v0.1.0.mod"), "sub's .mod: its go.mod as it is")
	require.NoDirExists(t, filepath.Join(out, "example.com/lib/bench"), "the unpublished module")

	// The root's zip holds neither sub's files nor bench's, which have a go.mod
	// of their own, nor testdata's fixture module.
	require.Equal(t, []string{"example.com/lib@v0.1.0/VERSION", "example.com/lib@v0.1.0/go.mod", "example.com/lib@v0.1.0/lib.go",
		"example.com/lib@v0.1.0/tools/release/unpublished.txt"},
		zipNames(t, filepath.Join(out, "example.com/lib/@v/v0.1.0.zip")), "the root's zip")
	require.Equal(t, []string{"example.com/lib/sub@v0.1.0/go.mod", "example.com/lib/sub@v0.1.0/inner/x.go", "example.com/lib/sub@v0.1.0/sub.go"},
		zipNames(t, filepath.Join(out, "example.com/lib/sub/@v/v0.1.0.zip")), "sub's zip")
}

func TestWriteProxyCaseEncodesPaths(t *testing.T) {
	tr := mustTree(t, with(goodTree(), noBench, map[string]string{"go.mod": "module example.com/Lib\n\ngo 1.26.0\n", "sub/go.mod": ""}))
	out := filepath.Join(t.TempDir(), "proxy")
	_, err := writeProxy(tr, out)
	require.NoError(t, err, "writeProxy")
	require.FileExists(t, filepath.Join(out, "example.com/!lib/@v/v0.1.0.zip"), "the zip, under the case-encoded path")
}

func zipNames(t *testing.T, name string) []string {
	t.Helper()
	z, err := zip.OpenReader(name)
	require.NoError(t, err, "open %s", name)
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}
