package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunPrintsTagsAndModules(t *testing.T) {
	tr := gitTree(t, goodTree())
	var out bytes.Buffer
	require.NoError(t, run([]string{"tags", "-root", tr.Root}, &out), "tags")
	require.Equal(t, "v0.1.0\nsub/v0.1.0\n", out.String(), "tags")

	out.Reset()
	require.NoError(t, run([]string{"modules", "-root", tr.Root}, &out), "modules")
	require.Equal(t, "example.com/lib v0.1.0\nexample.com/lib/sub v0.1.0\n", out.String(), "modules")

	out.Reset()
	require.NoError(t, run([]string{"check", "-tidy=false", "-root", tr.Root}, &out), "check")
	require.Equal(t, "", out.String(), "check's output")
}

func TestRunCheckFailsWithOneLinePerProblem(t *testing.T) {
	tr := gitTree(t, with(goodTree(), map[string]string{"VERSION": "v0.2.0\n"}))
	var out bytes.Buffer
	err := run([]string{"check", "-tidy=false", "-root", tr.Root}, &out)
	require.EqualError(t, err, "release: 3 problem(s) with releasing v0.2.0", "check")
	require.Equal(t, 3, bytes.Count(out.Bytes(), []byte("\n")), "lines printed: %s", out.String())
}

func TestRunRefusesAnUnknownCommand(t *testing.T) {
	tr := mustTree(t, goodTree())
	require.EqualError(t, run([]string{"publish", "-root", tr.Root}, &bytes.Buffer{}),
		`release: unknown command "publish": want check, tags, modules, set-version or proxy`, "run")
}

func TestRunLeavesOutWhatGitIgnoresAndWhatWasDeleted(t *testing.T) {
	tr := gitTree(t, with(goodTree(), map[string]string{".gitignore": "/scratch/\n", "scratch/go.mod": "module scratch\n\ngo 1.20\n"}))
	git(t, tr.Root, "add", "-A")
	require.NoError(t, os.Remove(filepath.Join(tr.Root, "lib.go")), "delete a tracked file")
	loaded, err := loadTree(tr.Root)
	require.NoError(t, err, "loadTree")
	require.Equal(t, []string{".", "bench", "sub"}, dirs(loaded.Modules), "modules: the ignored one is not among them")
	require.NotContains(t, loaded.Files, "lib.go", "files: a tracked file deleted from the working tree")
	require.Contains(t, loaded.Files, "sub/inner/x.go", "files: a tracked one")
}
