package keylimit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdmitsIsInlined: every call of shardStats.admits, the last step of
// every hot path, is inlined, as its doc says. A change that takes it over
// the inliner's budget would add a call to every Allow, and no other test
// would say so.
func TestAdmitsIsInlined(t *testing.T) {
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	require.NoError(t, err, "go build -gcflags=-m:\n%s", out)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	calls := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		calls += strings.Count(string(src), ".counts.admits(")
	}
	require.Positive(t, calls)
	var about []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "(*shardStats).admits") {
			about = append(about, line)
		}
	}
	require.Equal(t, calls, strings.Count(string(out), "inlining call to (*shardStats).admits"),
		"calls of shardStats.admits inlined, of %d; what the compiler said of it:\n%s", calls, strings.Join(about, "\n"))
}
