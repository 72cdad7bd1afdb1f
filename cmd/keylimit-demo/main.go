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
	"slices"
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

// register adds a scene to the tour, in order; each scene file calls it
// from init.
func register(s scene) {
	scenes = append(scenes, s)
	slices.SortStableFunc(scenes, func(a, b scene) int { return a.order - b.order })
}

func main() {
	only := flag.String("scene", "", "run only the scenes whose name contains this")
	list := flag.Bool("list", false, "list the scenes and exit")
	flag.Parse()
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

// tour runs the scenes whose name contains only, in order, and says first
// how many there are, so that a newcomer knows the tour ends by itself.
func tour(w io.Writer, only string) error {
	var run []scene
	for _, s := range scenes {
		if strings.Contains(s.name, only) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		return fmt.Errorf("no scene matches %q", only)
	}
	fmt.Fprintf(w, "keylimit-demo: %s of rate limiting, in real time; the tour ends by itself.\n", plural(len(run), "scene"))
	for i, s := range run {
		fmt.Fprintf(w, "\n=== %d/%d %s\n\n", i+1, len(run), s.title)
		if err := s.run(w); err != nil {
			return fmt.Errorf("scene %s: %w", s.name, err)
		}
	}
	fmt.Fprintf(w, "\ntour complete: %s\n", plural(len(run), "scene"))
	return nil
}

// plural counts things: "1 scene", "5 scenes", "0 requests".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// overBy gives a count's verdict against a limit of limit per period:
// "within 10/s", or how far over: "40% over 10/s".
func overBy(n, limit int, per string) string {
	if n <= limit {
		return fmt.Sprintf("within %d/%s", limit, per)
	}
	return fmt.Sprintf("%d%% over %d/%s", (n-limit)*100/limit, limit, per)
}
