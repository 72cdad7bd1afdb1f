package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
)

// Some scenes show a module of the repository other than this one (Redis,
// gRPC, Prometheus), whose dependencies this module must not gain: each
// such module has a demo command of its own, which the scene runs with go
// run.

// goRunCommand is what a reader types to run the command pkg of the module
// in dir: "cd grpclimit && go run ./cmd/grpc-demo".
func goRunCommand(dir, pkg string) string {
	return "cd " + dir + " && go run " + pkg
}

// canGoRun reports whether the tour can run a command of the module in dir
// (relative to the repository's root): it runs in real time (on the tests'
// mock clock, the command is left to its module's own tests), from the
// repository's root, where the module is, and the go command is at hand.
func canGoRun(dir string) bool {
	if _, mock := demoClock.(*clock.Mock); mock {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return false
	}
	_, err := exec.LookPath("go")
	return err == nil
}

// buildNote is how often goRun says that go run is still building.
var buildNote = 3 * time.Second

// goRun runs the command pkg of the module in dir with go run and copies
// its output to w, each line indented by 4 spaces. Until the command's
// first line, go run is building it: goRun says so every buildNote, so that
// a cold build never looks like a hang. It returns an error, with the
// command's standard error, if the command fails.
func goRun(w io.Writer, dir, pkg string) error {
	run := exec.Command("go", "run", pkg)
	run.Dir = dir
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.StdoutPipe()
	if err == nil {
		err = run.Start()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", goRunCommand(dir, pkg), err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	start, tick := time.Now(), time.NewTicker(buildNote)
	defer tick.Stop()
	building := true
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := run.Wait(); err != nil {
					return fmt.Errorf("%s: %w\n%s", goRunCommand(dir, pkg), err, stderr.String())
				}
				return nil
			}
			building = false
			fmt.Fprintf(w, "    %s\n", line)
		case <-tick.C:
			if building {
				fmt.Fprintf(w, "  ... still building (%.0f s)\n", time.Since(start).Seconds())
			}
		}
	}
}

// otherDemo ends a scene whose demo is the command pkg of the module in dir:
// it runs it when it can (canGoRun), saying first that go run builds it,
// with deps ("gRPC") the first time; else it says how to run it.
func otherDemo(w io.Writer, dir, pkg, deps string) error {
	if !canGoRun(dir) {
		fmt.Fprintln(w, "  See it run:")
		fmt.Fprintf(w, "      %s\n", goRunCommand(dir, pkg))
		return nil
	}
	fmt.Fprintln(w, "  Its demo runs now:")
	fmt.Fprintf(w, "      %s\n", goRunCommand(dir, pkg))
	fmt.Fprintf(w, "  (go run builds it first: the first time, with %s, up to half a minute)\n\n", deps)
	return goRun(w, dir, pkg)
}
