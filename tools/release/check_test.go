package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckAcceptsAReleasableTree(t *testing.T) {
	tr := mustTree(t, goodTree())
	require.Equal(t, []string{".", "bench", "sub"}, dirs(tr.Modules), "modules found (testdata's go.mod is a fixture)")
	require.Nil(t, check(tr), "problems in a releasable tree")
}

// Each case breaks goodTree one way; check must report exactly that, once.
func TestCheckReportsEachWayAReleaseWouldBreak(t *testing.T) {
	sub := func(requires, replaces string) string {
		return "module example.com/lib/sub\n\ngo 1.26.0\n\n" + requires + "\n" + replaces
	}
	cases := []struct {
		name  string
		edits map[string]string
		bench bool // keep goodTree's unpublished module
		want  string
	}{{
		name:  "a nested module requires the root at a version the release does not tag",
		edits: map[string]string{"sub/go.mod": sub("require example.com/lib v0.0.0-00010101000000-000000000000\n", "replace example.com/lib => ../\n")},
		want:  "sub/go.mod: requires example.com/lib v0.0.0-00010101000000-000000000000, but the release tags it v0.1.0",
	}, {
		name:  "VERSION moved on and a module was left behind",
		edits: map[string]string{"VERSION": "v0.2.0\n"},
		want:  "sub/go.mod: requires example.com/lib v0.1.0, but the release tags it v0.2.0",
	}, {
		name:  "a required module of ours without its replace",
		edits: map[string]string{"sub/go.mod": sub("require example.com/lib v0.1.0\n", "")},
		want:  "sub/go.mod: requires example.com/lib but does not replace it: add `replace example.com/lib => ../`",
	}, {
		name:  "our module replaced by the wrong directory",
		edits: map[string]string{"sub/go.mod": sub("require example.com/lib v0.1.0\n", "replace example.com/lib => ../sub\n")},
		want:  "sub/go.mod: replaces example.com/lib with something other than its directory: want `replace example.com/lib => ../`",
	}, {
		name:  "our module replaced by a version",
		edits: map[string]string{"sub/go.mod": sub("require example.com/lib v0.1.0\n", "replace example.com/lib => example.com/fork v0.1.0\n")},
		want:  "sub/go.mod: replaces example.com/lib with something other than its directory",
	}, {
		name:  "a published module replaces someone else's",
		edits: map[string]string{"sub/go.mod": sub("require example.com/lib v0.1.0\n", "replace example.com/lib => ../\n\nreplace example.com/peer => ../peer\n")},
		want:  "sub/go.mod: replaces example.com/peer: users of example.com/lib/sub ignore its replaces",
	}, {
		name: "a published module requires an unpublished one",
		edits: map[string]string{"sub/go.mod": sub("require (\n\texample.com/lib v0.1.0\n\texample.com/lib/bench v0.1.0\n)\n",
			"replace (\n\texample.com/lib => ../\n\texample.com/lib/bench => ../bench\n)\n")},
		bench: true,
		want:  "sub/go.mod: requires example.com/lib/bench, which is not published",
	}, {
		name:  "a require of a path under ours that no module is",
		edits: map[string]string{"sub/go.mod": sub("require (\n\texample.com/lib v0.1.0\n\texample.com/lib/gone v0.1.0\n)\n", "replace example.com/lib => ../\n")},
		want:  "sub/go.mod: requires example.com/lib/gone, which no module in the tree is",
	}, {
		name:  "a go directive unlike the root's",
		edits: map[string]string{"sub/go.mod": strings.Replace(goodTree()["sub/go.mod"], "go 1.26.0", "go 1.26", 1)},
		want:  "sub/go.mod: go 1.26, but the root go.mod says go 1.26.0",
	}, {
		name:  "the root's go directive in the short form",
		edits: map[string]string{"go.mod": "module example.com/lib\n\ngo 1.26\n", "sub/go.mod": ""},
		want:  "go.mod: go 1.26: write the full version",
	}, {
		name:  "a toolchain line only one module has",
		edits: map[string]string{"sub/go.mod": goodTree()["sub/go.mod"] + "\ntoolchain go1.26.8\n"},
		want:  "sub/go.mod: toolchain go1.26.8, but the root go.mod has toolchain (none)",
	}, {
		name:  "a module path the tag for its directory would not publish",
		edits: map[string]string{"sub/go.mod": strings.Replace(goodTree()["sub/go.mod"], "example.com/lib/sub", "example.com/lib/other", 1)},
		want:  "sub/go.mod: module example.com/lib/other, but the tag sub/v0.1.0 publishes the module in sub as example.com/lib/sub",
	}, {
		name:  "a v2 VERSION for a module path without /v2",
		edits: map[string]string{"VERSION": "v2.0.0\n", "sub/go.mod": ""},
		want:  "go.mod: VERSION v2.0.0 does not fit module example.com/lib",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := with(goodTree(), noBench, c.edits)
			if c.bench {
				files = with(goodTree(), c.edits)
			}
			problems := check(mustTree(t, files))
			require.Len(t, problems, 1, "problems: %q", problems)
			require.Contains(t, problems[0], c.want, "the problem reported")
		})
	}
}

func TestCheckAllowsAnyReplaceInAnUnpublishedModule(t *testing.T) {
	tr := mustTree(t, goodTree())
	bench := tr.own("example.com/lib/bench")
	require.False(t, bench.Published, "bench is listed as unpublished")
	require.Len(t, bench.File.Replace, 3, "bench's replaces, one of them someone else's")
	require.Nil(t, check(tr), "problems")
}

func TestTidyDiffNamesTheUntidyModule(t *testing.T) {
	// sub requires the root but imports nothing: tidy would drop the require.
	// Everything resolves in the tree, so no network is needed.
	tr := mustTree(t, with(goodTree(), noBench, map[string]string{"sub/sub.go": "package sub\n"}))
	problems := tidyDiff(tr)
	require.Len(t, problems, 1, "problems: %q", problems)
	require.True(t, strings.HasPrefix(problems[0], "sub/go.mod: go mod tidy -diff fails"), "problem: %s", problems[0])
	require.Contains(t, problems[0], "\n-require example.com/lib v0.1.0 // the root\n", "the diff tidy printed")

	tr = mustTree(t, with(goodTree(), noBench))
	require.Nil(t, tidyDiff(tr), "problems in a tidy tree")
}
