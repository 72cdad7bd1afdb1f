package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// writeProxy writes to out (which must not exist) a module proxy that serves
// every published module at tr.Version as a release's tags would publish it,
// for use as GOPROXY=file://out. It returns the modules it wrote, in release
// order.
func writeProxy(tr *tree, out string) ([]*modDir, error) {
	mods, err := releaseOrder(tr)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(out, 0o777); err != nil {
		return nil, fmt.Errorf("release: proxy: %v", err)
	}
	// The zips are made from a copy holding only the files a commit would,
	// so nothing git ignores (test binaries, profiles) reaches them.
	src, err := os.MkdirTemp("", "keylimit-release-src-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	for _, f := range tr.Files {
		if err := copyFile(filepath.Join(src, filepath.FromSlash(f)), filepath.Join(tr.Root, filepath.FromSlash(f))); err != nil {
			return nil, fmt.Errorf("release: proxy: %v", err)
		}
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{tr.Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return nil, err
	}
	for _, m := range mods {
		if err := writeVersion(out, filepath.Join(src, filepath.FromSlash(m.Dir)), module.Version{Path: m.Path, Version: tr.Version}, info); err != nil {
			return nil, fmt.Errorf("release: proxy: %s: %v", m.Path, err)
		}
	}
	return mods, nil
}

// writeVersion writes the four files a GOPROXY serves for mv, whose source is
// in dir: $path/@v/list, then $version.info, .mod and .zip, each path and
// version case-encoded. The zip leaves out every directory holding a go.mod
// of its own, as the proxy's zips do.
func writeVersion(out, dir string, mv module.Version, info []byte) error {
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o777); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVersion)
	if err := os.WriteFile(filepath.Join(vdir, "list"), []byte(mv.Version+"\n"), 0o666); err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o666); err != nil {
		return err
	}
	if err := copyFile(base+".mod", filepath.Join(dir, "go.mod")); err != nil {
		return err
	}
	z, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(z, mv, dir); err != nil {
		z.Close()
		return err
	}
	return z.Close()
}

// copyFile copies the regular file from to a new file to, making its directory.
func copyFile(to, from string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o777); err != nil {
		return err
	}
	r, err := os.Open(from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
