package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// tidyDiff returns, for each module where go mod tidy would change go.mod or
// go.sum, a line naming it followed by the change tidy would make (or the
// error it met). Each module is tidied on its own (GOWORK=off), as a user's
// go command and the module proxy see it.
func tidyDiff(tr *tree) []string {
	var problems []string
	for _, m := range tr.Modules {
		cmd := exec.Command("go", "mod", "tidy", "-diff")
		cmd.Dir = filepath.Join(tr.Root, filepath.FromSlash(m.Dir))
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			problems = append(problems, m.GoMod()+": go mod tidy -diff fails ("+err.Error()+"); run go mod tidy in "+m.Dir+". It printed:\n"+
				strings.TrimRight(string(out), "\n"))
		}
	}
	return problems
}
