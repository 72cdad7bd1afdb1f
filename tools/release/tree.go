package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// unpublishedFile lists, one directory a line, the modules a release does not
// tag; it is relative to the repository's top directory.
const unpublishedFile = "tools/release/unpublished.txt"

// A tree is the repository as a commit of its working tree would hold it.
type tree struct {
	Root    string    // the repository's top directory, absolute
	Version string    // from VERSION: what the next (or latest) release tags every published module with
	Files   []string  // every file a commit would hold, slash-separated, relative to Root, sorted
	Modules []*modDir // every module, sorted by Dir, so the root module comes first
	byPath  map[string]*modDir
}

// A modDir is one module of the tree.
type modDir struct {
	Dir       string // slash-separated, relative to the tree's Root; "." for the root module
	Path      string // the module path its go.mod declares
	File      *modfile.File
	Published bool // tagged by a release; false for the dirs listed in unpublishedFile
}

// GoMod is the module's go.mod, relative to the tree's Root.
func (m *modDir) GoMod() string { return path.Join(m.Dir, "go.mod") }

// loadTree reads the tree at root: the files git would commit (tracked ones
// that still exist, and untracked ones it does not ignore), VERSION, and
// every go.mod among them.
func loadTree(root string) (*tree, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("release: git ls-files in %s: %v", root, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		// A tracked file deleted from the working tree would not be committed.
		if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	return newTree(root, files)
}

// newTree builds the tree at root from the list of its files.
func newTree(root string, files []string) (*tree, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	files = slices.Compact(slices.Sorted(slices.Values(files)))
	tr := &tree{Root: root, Files: files, byPath: map[string]*modDir{}}

	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, fmt.Errorf("release: %v", err)
	}
	tr.Version = strings.TrimSpace(string(v))
	if err := checkVersion(tr.Version); err != nil {
		return nil, fmt.Errorf("release: VERSION: %v", err)
	}

	unpublished, err := readUnpublished(root)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if path.Base(f) != "go.mod" || ignoredByGo(path.Dir(f)) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("release: %v", err)
		}
		mf, err := modfile.Parse(f, data, nil)
		if err != nil {
			return nil, fmt.Errorf("release: %v", err)
		}
		if mf.Module == nil {
			return nil, fmt.Errorf("release: %s has no module line", f)
		}
		m := &modDir{Dir: path.Dir(f), Path: mf.Module.Mod.Path, File: mf}
		m.Published = !unpublished[m.Dir]
		delete(unpublished, m.Dir)
		if other := tr.byPath[m.Path]; other != nil {
			return nil, fmt.Errorf("release: %s and %s both declare module %s", other.GoMod(), m.GoMod(), m.Path)
		}
		tr.byPath[m.Path] = m
		tr.Modules = append(tr.Modules, m)
	}
	sort.Slice(tr.Modules, func(i, j int) bool {
		a, b := tr.Modules[i].Dir, tr.Modules[j].Dir
		return a == "." && b != "." || a != "." && b != "." && a < b
	})
	if len(tr.Modules) == 0 || tr.Modules[0].Dir != "." {
		return nil, fmt.Errorf("release: no go.mod at the top of %s", root)
	}
	if !tr.Modules[0].Published {
		return nil, fmt.Errorf("release: %s lists the root module: every release publishes it", unpublishedFile)
	}
	for dir := range unpublished {
		return nil, fmt.Errorf("release: %s lists %s, which holds no module", unpublishedFile, dir)
	}
	return tr, nil
}

// checkVersion says why v cannot be the version of a release, if it cannot.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("%q is not a full semantic version such as v0.1.0", v)
	}
	return nil
}

// readUnpublished returns the set of module directories unpublishedFile lists.
func readUnpublished(root string) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(unpublishedFile)))
	if err != nil {
		return nil, fmt.Errorf("release: %v", err)
	}
	dirs := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			dirs[path.Clean(strings.TrimSuffix(line, "/"))] = true
		}
	}
	return dirs, sc.Err()
}

// ignoredByGo reports whether the go command ignores dir (slash-separated,
// relative to the tree): a go.mod under testdata, or under a directory whose
// name starts with . or _, is a fixture, not one of our modules.
func ignoredByGo(dir string) bool {
	if dir == "." {
		return false
	}
	for _, elem := range strings.Split(dir, "/") {
		if elem == "testdata" || elem == "vendor" || strings.HasPrefix(elem, ".") || strings.HasPrefix(elem, "_") {
			return true
		}
	}
	return false
}

// own returns our module with the given path, or nil.
func (tr *tree) own(modPath string) *modDir { return tr.byPath[modPath] }

// ownPrefix reports whether modPath lies under the root module's path, where
// only our own modules may be.
func (tr *tree) ownPrefix(modPath string) bool {
	prefix, _, _ := module.SplitPathVersion(tr.Modules[0].Path)
	return modPath == tr.Modules[0].Path || strings.HasPrefix(modPath, prefix+"/")
}

// expectedPath is the module path that the tag dir/vX.Y.Z publishes for the
// module in dir: the root's path, then dir, then the major version suffix
// (/v2 and up) the root's path carries.
func (tr *tree) expectedPath(dir string) string {
	if dir == "." {
		return tr.Modules[0].Path
	}
	prefix, major, _ := module.SplitPathVersion(tr.Modules[0].Path)
	return prefix + "/" + dir + major
}

// tagName is the tag that publishes m at version v.
func tagName(m *modDir, v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}
