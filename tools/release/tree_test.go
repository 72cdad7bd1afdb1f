package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTreeMarksTheUnpublishedModules(t *testing.T) {
	tr := mustTree(t, goodTree())
	require.Equal(t, "v0.1.0", tr.Version, "VERSION")
	var published []string
	for _, m := range tr.Modules {
		if m.Published {
			published = append(published, m.Path)
		}
	}
	require.Equal(t, []string{"example.com/lib", "example.com/lib/sub"}, published, "published modules")
}

func TestTreeRefuses(t *testing.T) {
	cases := []struct {
		name  string
		edits map[string]string
		want  string
	}{
		{"a VERSION that is not a full semantic version", map[string]string{"VERSION": "v0.1\n"}, `VERSION: "v0.1" is not a full semantic version`},
		{"a VERSION with build metadata", map[string]string{"VERSION": "v0.1.0+meta\n"}, `VERSION: "v0.1.0+meta" is not a full semantic version`},
		{"no VERSION", map[string]string{"VERSION": ""}, "VERSION: no such file"},
		{"an unpublished list naming no module", map[string]string{"tools/release/unpublished.txt": "bench\ngone/\n"}, "lists gone, which holds no module"},
		{"an unpublished root module", map[string]string{"tools/release/unpublished.txt": ".\nbench\n"}, "lists the root module"},
		{"no root module", map[string]string{"go.mod": "", "tools/release/unpublished.txt": "bench\n"}, "no go.mod at the top"},
		{"two modules with one path", map[string]string{"sub/go.mod": "module example.com/lib\n\ngo 1.26.0\n"}, "go.mod and sub/go.mod both declare module example.com/lib"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := writeTree(t, with(goodTree(), c.edits))
			require.ErrorContains(t, err, c.want, "loading the tree")
		})
	}
}

func TestExpectedPathCarriesTheMajorVersion(t *testing.T) {
	tr := mustTree(t, with(goodTree(), noBench, map[string]string{"go.mod": "module example.com/lib/v2\n\ngo 1.26.0\n"}))
	require.Equal(t, "example.com/lib/v2", tr.expectedPath("."), "root")
	require.Equal(t, "example.com/lib/sub/v2", tr.expectedPath("sub"), "nested")
	require.True(t, tr.ownPrefix("example.com/lib/sub/v2"), "a nested v2 path is ours")
	require.False(t, tr.ownPrefix("example.com/library"), "a path that only starts with the same letters is not ours")
}
