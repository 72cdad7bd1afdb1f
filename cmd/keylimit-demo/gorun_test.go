package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// The commands of the module the tests run with go run: one that takes a
// while before its first line and then prints two, one that fails.
var testCommands = map[string]string{
	"ok": `package main

import (
	"fmt"
	"time"
)

func main() {
	time.Sleep(100 * time.Millisecond)
	fmt.Println("first line")
	fmt.Println("second line")
}
`,
	"fail": `package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("a line before failing")
	fmt.Fprintln(os.Stderr, "boom")
	os.Exit(3)
}
`,
}

// TestGoRun: the command's lines are copied, indented; until the first, a
// note says every buildNote that go run is still building; a failing
// command's error carries its standard error.
func TestGoRun(t *testing.T) {
	dir := tempModule(t, testCommands)
	note := buildNote
	buildNote = 10 * time.Millisecond
	t.Cleanup(func() { buildNote = note })

	var out bytes.Buffer
	require.NoError(t, goRun(&out, dir, "./ok"))
	notes, lines := building(out.String())
	require.Positive(t, notes, "notes while the command made no line for 100 ms; output:\n%s", out.String())
	require.Equal(t, "    first line\n    second line\n", lines, "the command's lines, after the notes")

	out.Reset()
	err := goRun(&out, dir, "./fail")
	// go run itself exits 1, saying on standard error how its command exited.
	require.EqualError(t, err, goRunCommand(dir, "./fail")+": exit status 1\nboom\nexit status 3\n")
	_, lines = building(out.String())
	require.Equal(t, "    a line before failing\n", lines, "the failing command's lines, after any notes")
}

// building splits goRun's output into the count of its leading notes that
// go run is still building, and the rest.
func building(out string) (notes int, rest string) {
	for strings.HasPrefix(out, "  ... still building (") {
		_, out, _ = strings.Cut(out, "\n")
		notes++
	}
	return notes, out
}

// TestOtherDemo: on the real clock, with the module at hand, a scene runs
// the module's demo and says so first; on the tests' mock clock, or without
// the module (the tour run from elsewhere), it says how to run it.
func TestOtherDemo(t *testing.T) {
	dir := tempModule(t, testCommands)
	onClock(t, clock.NewMock())
	var out bytes.Buffer
	require.NoError(t, otherDemo(&out, dir, "./ok", "nothing"), "on the mock clock")
	require.Equal(t, "  See it run:\n      cd "+dir+" && go run ./ok\n", out.String(), "on the mock clock")

	onClock(t, clock.New())
	note := buildNote
	buildNote = time.Minute // no note: the output is exact
	t.Cleanup(func() { buildNote = note })
	out.Reset()
	require.NoError(t, otherDemo(&out, dir, "./ok", "nothing"))
	require.Equal(t, "  Its demo runs now:\n      cd "+dir+" && go run ./ok\n"+
		"  (go run builds it first: the first time, with nothing, up to half a minute)\n\n"+
		"    first line\n    second line\n", out.String())

	out.Reset()
	missing := t.TempDir() // no go.mod
	require.NoError(t, otherDemo(&out, missing, "./ok", "nothing"))
	require.Equal(t, "  See it run:\n      cd "+missing+" && go run ./ok\n", out.String(), "without the module")
}
