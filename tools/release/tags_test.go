package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReleaseOrderPutsEachModuleAfterTheOnesItRequires(t *testing.T) {
	// a requires z (a sibling), so z is tagged before a although a sorts first.
	mod := func(path, requires, replaces string) string {
		return "module " + path + "\n\ngo 1.26.0\n\nrequire (\n" + requires + ")\n\nreplace (\n" + replaces + ")\n"
	}
	tr := mustTree(t, with(goodTree(), map[string]string{
		"a/go.mod": mod("example.com/lib/a", "\texample.com/lib v0.1.0\n\texample.com/lib/z v0.1.0\n",
			"\texample.com/lib => ../\n\texample.com/lib/z => ../z\n"),
		"z/go.mod": mod("example.com/lib/z", "\texample.com/lib v0.1.0\n", "\texample.com/lib => ../\n"),
	}))
	require.Nil(t, check(tr), "problems")
	mods, err := releaseOrder(tr)
	require.NoError(t, err, "releaseOrder")
	var tags []string
	for _, m := range mods {
		tags = append(tags, tagName(m, tr.Version))
	}
	require.Equal(t, []string{"v0.1.0", "z/v0.1.0", "a/v0.1.0", "sub/v0.1.0"}, tags, "tags in order; bench is not tagged")
}

func TestReleaseOrderRefusesACycle(t *testing.T) {
	tr := mustTree(t, with(goodTree(), noBench, map[string]string{
		"go.mod": "module example.com/lib\n\ngo 1.26.0\n\nrequire example.com/lib/sub v0.1.0\n\nreplace example.com/lib/sub => ./sub\n",
	}))
	_, err := releaseOrder(tr)
	require.EqualError(t, err, "release: our modules require each other in a cycle: . -> sub -> .", "releaseOrder")
}
