// Command release keeps keylimit's modules releasable together, at the one
// version in the repository's VERSION file. Run it from anywhere in the
// repository (RELEASING.md says when each command is used):
//
//	go run ./release check             every go.mod agrees with VERSION, and go mod tidy changes nothing
//	go run ./release tags              the tags a release makes, in the order to push them
//	go run ./release modules           the published modules and VERSION, a line each, in that order
//	go run ./release set-version vX.Y.Z  write VERSION, and require vX.Y.Z of our own modules everywhere
//	go run ./release proxy -out DIR    a file-based module proxy holding every published module at VERSION
//
// The modules are every go.mod a commit of the working tree would hold;
// the published ones are all but those listed in unpublished.txt beside
// this file. check exits 1 and prints one line per problem found.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("release: usage: release check | tags | modules | set-version vX.Y.Z | proxy -out DIR")
	}
	switch args[0] {
	case "check", "tags", "modules", "set-version", "proxy":
	default:
		return fmt.Errorf("release: unknown command %q: want check, tags, modules, set-version or proxy", args[0])
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	root := fs.String("root", "", "the repository's top directory (default: git's top level of the current directory)")
	tidy := fs.Bool("tidy", true, "check: also run go mod tidy -diff in every module")
	out := fs.String("out", "", "proxy: the directory to write the module proxy to; must not exist yet")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *root == "" {
		top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("release: finding the repository's top directory: %v (pass -root)", err)
		}
		*root = strings.TrimSpace(string(top))
	}
	tr, err := loadTree(*root)
	if err != nil {
		return err
	}
	switch args[0] {
	case "check":
		problems := check(tr)
		if *tidy {
			problems = append(problems, tidyDiff(tr)...)
		}
		for _, p := range problems {
			fmt.Fprintln(stdout, p)
		}
		if len(problems) > 0 {
			return fmt.Errorf("release: %d problem(s) with releasing %s", len(problems), tr.Version)
		}
		return nil
	case "tags":
		mods, err := releaseOrder(tr)
		if err != nil {
			return err
		}
		for _, m := range mods {
			fmt.Fprintln(stdout, tagName(m, tr.Version))
		}
		return nil
	case "modules":
		mods, err := releaseOrder(tr)
		if err != nil {
			return err
		}
		for _, m := range mods {
			fmt.Fprintln(stdout, m.Path, tr.Version)
		}
		return nil
	case "set-version":
		if fs.NArg() != 1 {
			return fmt.Errorf("release: usage: release set-version vX.Y.Z")
		}
		return setVersion(tr, fs.Arg(0))
	case "proxy":
		if *out == "" {
			return fmt.Errorf("release: proxy needs -out DIR")
		}
		mods, err := writeProxy(tr, *out)
		if err != nil {
			return err
		}
		for _, m := range mods {
			fmt.Fprintln(stdout, m.Path, tr.Version)
		}
	}
	return nil
}
