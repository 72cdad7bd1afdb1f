package main

import (
	"fmt"
	"strings"
)

// releaseOrder returns the published modules in the order their tags are
// pushed and fetched through the module proxy: the root module first, then
// each module after every one of ours it requires, otherwise by directory. A
// module asked of the proxy before one it requires is tagged would fail to
// resolve, and the proxy may remember that failure for a while.
func releaseOrder(tr *tree) ([]*modDir, error) {
	var order []*modDir
	state := map[*modDir]int{} // 0 unvisited, 1 in progress, 2 placed
	var visit func(m *modDir, via []string) error
	visit = func(m *modDir, via []string) error {
		switch state[m] {
		case 1:
			return fmt.Errorf("release: our modules require each other in a cycle: %s", strings.Join(append(via, m.Dir), " -> "))
		case 2:
			return nil
		}
		state[m] = 1
		for _, r := range m.File.Require {
			if dep := tr.own(r.Mod.Path); dep != nil && dep.Published {
				if err := visit(dep, append(via, m.Dir)); err != nil {
					return err
				}
			}
		}
		state[m] = 2
		order = append(order, m)
		return nil
	}
	for _, m := range tr.Modules { // the root module first, then by directory
		if m.Published {
			if err := visit(m, nil); err != nil {
				return nil, err
			}
		}
	}
	return order, nil
}
