package grpclimit_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// grpclimit decides calls with quota, not through HTTP: none of its files
// imports httplimit or net/http (issue 22), so that a change to how HTTP
// answers cannot change how a call is decided.
func TestNoHTTPImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.NotContains(t, []string{"net/http", "github.com/keylimit/keylimit/httplimit"}, path, "%s imports it", name)
		}
		checked++
	}
	require.Positive(t, checked)
}
