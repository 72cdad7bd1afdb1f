package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// setVersion writes v to VERSION and makes every module require v of each of
// our modules it requires, keeping the rest of each go.mod as it was.
func setVersion(tr *tree, v string) error {
	if err := checkVersion(v); err != nil {
		return fmt.Errorf("release: set-version: %v", err)
	}
	for _, m := range tr.Modules {
		var stale []string
		for _, r := range m.File.Require {
			if tr.own(r.Mod.Path) != nil && r.Mod.Version != v {
				stale = append(stale, r.Mod.Path)
			}
		}
		if len(stale) == 0 {
			continue
		}
		for _, p := range stale {
			// AddRequire rewrites the existing line in place, keeping its comments.
			if err := m.File.AddRequire(p, v); err != nil {
				return fmt.Errorf("release: %s: %v", m.GoMod(), err)
			}
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return fmt.Errorf("release: %s: %v", m.GoMod(), err)
		}
		if err := os.WriteFile(filepath.Join(tr.Root, filepath.FromSlash(m.GoMod())), data, 0o666); err != nil {
			return fmt.Errorf("release: %v", err)
		}
	}
	tr.Version = v
	return os.WriteFile(filepath.Join(tr.Root, "VERSION"), []byte(v+"\n"), 0o666)
}
