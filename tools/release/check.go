package main

import (
	"fmt"
	"path"
	"regexp"

	"golang.org/x/mod/module"
)

// goDirective is the one form of go directive every module uses: the full
// release version, as go get go@1.N and go mod tidy write it.
var goDirective = regexp.MustCompile(`^1\.[0-9]+\.[0-9]+$`)

// check returns, one line each, every way the tree's go.mod files disagree
// with releasing every published module at tr.Version by the steps in
// RELEASING.md. None means each module, fetched from a proxy at that version,
// resolves our own modules to the versions the same release tags.
func check(tr *tree) []string {
	var problems []string
	report := func(m *modDir, format string, args ...any) {
		problems = append(problems, m.GoMod()+": "+fmt.Sprintf(format, args...))
	}
	root := tr.Modules[0]
	_, major, _ := module.SplitPathVersion(root.Path)
	if err := module.CheckPathMajor(tr.Version, major); err != nil {
		report(root, "VERSION %s does not fit module %s: %v", tr.Version, root.Path, err)
	}
	for _, m := range tr.Modules {
		checkDirectives(tr, m, report)
		if want := tr.expectedPath(m.Dir); m.Path != want {
			report(m, "module %s, but the tag %s publishes the module in %s as %s", m.Path, tagName(m, tr.Version), m.Dir, want)
		}
		checkRequires(tr, m, report)
		checkReplaces(tr, m, report)
	}
	return problems
}

// checkDirectives reports a go or toolchain line that differs from the root
// module's, and a go line not in the form goDirective.
func checkDirectives(tr *tree, m *modDir, report func(*modDir, string, ...any)) {
	root := tr.Modules[0]
	goLine := func(m *modDir) string {
		if m.File.Go == nil {
			return ""
		}
		return m.File.Go.Version
	}
	toolchain := func(m *modDir) string {
		if m.File.Toolchain == nil {
			return "(none)"
		}
		return m.File.Toolchain.Name
	}
	switch g := goLine(m); {
	case g == "":
		report(m, "no go directive")
	case m == root && !goDirective.MatchString(g):
		report(m, "go %s: write the full version, such as go 1.26.0, as every module does", g)
	case m != root && g != goLine(root):
		report(m, "go %s, but the root go.mod says go %s: every module uses the same go directive", g, goLine(root))
	}
	if m != root && toolchain(m) != toolchain(root) {
		report(m, "toolchain %s, but the root go.mod has toolchain %s: every module says the same", toolchain(m), toolchain(root))
	}
}

// checkRequires reports a requirement of one of our own modules at a version
// other than tr.Version, on a module the release does not publish, or
// without the replace that builds it from the tree.
func checkRequires(tr *tree, m *modDir, report func(*modDir, string, ...any)) {
	for _, r := range m.File.Require {
		dep := tr.own(r.Mod.Path)
		if dep == nil {
			if tr.ownPrefix(r.Mod.Path) {
				report(m, "requires %s, which no module in the tree is", r.Mod.Path)
			}
			continue
		}
		if r.Mod.Version != tr.Version {
			report(m, "requires %s %s, but the release tags it %s (VERSION); run: cd tools && go run ./release set-version %s",
				r.Mod.Path, r.Mod.Version, tr.Version, tr.Version)
		}
		if m.Published && !dep.Published {
			report(m, "requires %s, which is not published (%s): users could not resolve it", r.Mod.Path, unpublishedFile)
		}
		if !replaces(m, dep) {
			report(m, "requires %s but does not replace it: add `replace %s => %s`, so that the tree builds before the tag exists",
				r.Mod.Path, r.Mod.Path, relDir(m.Dir, dep.Dir))
		}
	}
}

// checkReplaces reports a replace of one of our modules by anything but its
// directory in the tree, and, in a published module, any other replace: users
// of a module ignore its replaces, so one there would build differently for
// them than in the tree.
func checkReplaces(tr *tree, m *modDir, report func(*modDir, string, ...any)) {
	for _, rep := range m.File.Replace {
		dep := tr.own(rep.Old.Path)
		switch {
		case dep == nil && m.Published:
			report(m, "replaces %s: users of %s ignore its replaces, so it would build differently for them", rep.Old.Path, m.Path)
		case dep == nil:
		case rep.Old.Version != "" || rep.New.Version != "" || path.Join(m.Dir, rep.New.Path) != dep.Dir:
			report(m, "replaces %s with something other than its directory: want `replace %s => %s`",
				rep.Old.Path, rep.Old.Path, relDir(m.Dir, dep.Dir))
		}
	}
}

// replaces reports whether m's go.mod replaces dep (checkReplaces says with what).
func replaces(m, dep *modDir) bool {
	for _, rep := range m.File.Replace {
		if rep.Old.Path == dep.Path {
			return true
		}
	}
	return false
}

// relDir is the directory to, written relative to from, as a replace names it.
func relDir(from, to string) string {
	up := ""
	for d := from; d != "."; d = path.Dir(d) {
		up += "../"
	}
	if up == "" {
		up = "./"
	}
	if to == "." {
		return up
	}
	return up + to
}
