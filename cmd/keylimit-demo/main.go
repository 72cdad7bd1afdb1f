// Command keylimit-demo is a tour of the classic rate-limiting scenarios,
// run end to end with the keylimit library. It needs no setup and ends by
// itself:
//
//	go run ./cmd/keylimit-demo
//
// Each scene is in a file of its own (scene_*.go) and registers itself in
// the tour; -scene runs only the scenes whose name contains a string.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
)

// scene is one stop of the tour.
type scene struct {
	order int    // scenes run in ascending order
	name  string // short, used by -scene
	title string
	run   func(w io.Writer) error
}

var scenes []scene

// demoClock is the clock every scene's limiters and pauses use: real time
// for the tour, a mock in the tests so that they check exact numbers.
var demoClock clock.Clock = clock.New()

// pause waits d on demoClock.
func pause(d time.Duration) {
	if m, ok := demoClock.(*clock.Mock); ok {
		m.Add(d)
		return
	}
	time.Sleep(d)
}

// register adds a scene to the tour; each scene file calls it from init.
func register(s scene) { scenes = append(scenes, s) }

func main() {
	only := flag.String("scene", "", "run only the scenes whose name contains this")
	list := flag.Bool("list", false, "list the scenes and exit")
	flag.Parse()
	sort.Slice(scenes, func(i, j int) bool { return scenes[i].order < scenes[j].order })
	if *list {
		for _, s := range scenes {
			fmt.Printf("%-12s %s\n", s.name, s.title)
		}
		return
	}
	if err := tour(os.Stdout, *only); err != nil {
		fmt.Fprintln(os.Stderr, "keylimit-demo:", err)
		os.Exit(1)
	}
}

func tour(w io.Writer, only string) error {
	ran := 0
	for _, s := range scenes {
		if !strings.Contains(s.name, only) {
			continue
		}
		fmt.Fprintf(w, "\n=== %s\n\n", s.title)
		if err := s.run(w); err != nil {
			return fmt.Errorf("scene %s: %w", s.name, err)
		}
		ran++
	}
	if ran == 0 {
		return fmt.Errorf("no scene matches %q", only)
	}
	fmt.Fprintf(w, "\ntour complete: %d scenes\n", ran)
	return nil
}
