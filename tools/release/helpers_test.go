package main

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// goodTree is a small repository that a release of v0.1.0 could publish as
// it is: a root module, a nested module requiring it, and an unpublished
// module requiring both, with a replace the check allows only there.
func goodTree() map[string]string {
	return map[string]string{
		"VERSION":                       "v0.1.0\n",
		"tools/release/unpublished.txt": "# not tagged\nbench  # peers\n",
		"go.mod":                        "module example.com/lib\n\ngo 1.26.0\n",
		"lib.go":                        "package lib\n",
		"sub/go.mod": "module example.com/lib/sub\n\ngo 1.26.0\n\n" +
			"require example.com/lib v0.1.0 // the root\n\nreplace example.com/lib => ../\n",
		"sub/sub.go":      "package sub\n\nimport _ \"example.com/lib\"\n",
		"sub/inner/x.go":  "package inner\n",
		"testdata/go.mod": "module fixture\n\ngo 1.20\n",
		"bench/go.mod": "module example.com/lib/bench\n\ngo 1.26.0\n\n" +
			"require (\n\texample.com/lib v0.1.0\n\texample.com/lib/sub v0.1.0\n)\n\n" +
			"replace (\n\texample.com/lib => ../\n\texample.com/lib/sub => ../sub\n\texample.com/peer => ../../peer\n)\n",
		"bench/bench.go": "package bench\n\nimport (\n\t_ \"example.com/lib\"\n\t_ \"example.com/lib/sub\"\n)\n",
	}
}

// noBench removes goodTree's unpublished module.
var noBench = map[string]string{"bench/go.mod": "", "bench/bench.go": "", "tools/release/unpublished.txt": "# none\n"}

// with returns a copy of files with each set of edits applied in turn; an
// empty content removes a file.
func with(files map[string]string, edits ...map[string]string) map[string]string {
	out := maps.Clone(files)
	for _, e := range edits {
		for name, content := range e {
			if content == "" {
				delete(out, name)
			} else {
				out[name] = content
			}
		}
	}
	return out
}

// writeTree writes files to a new directory and loads it as a tree.
func writeTree(t *testing.T, files map[string]string) (*tree, error) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o777), "mkdir for %s", name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o666), "write %s", name)
	}
	return newTree(dir, slices.Collect(maps.Keys(files)))
}

// mustTree is writeTree for a tree that must load.
func mustTree(t *testing.T, files map[string]string) *tree {
	t.Helper()
	tr, err := writeTree(t, files)
	require.NoError(t, err, "loading the tree")
	return tr
}

// gitTree is mustTree in a new git repository, its files untracked.
func gitTree(t *testing.T, files map[string]string) *tree {
	t.Helper()
	tr := mustTree(t, files)
	git(t, tr.Root, "init", "-q")
	return tr
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

// dirs lists the modules' directories.
func dirs(mods []*modDir) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Dir)
	}
	return out
}
