package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
)

func init() {
	register(scene{order: 20, name: "boundary", title: "The window boundary: fixed window, sliding window and sliding counter on the same requests", run: boundaryScene})
}

// boundaryScene: one client sends 4 requests every 100 ms, from half a
// second before a window boundary to half a second after, to three limiters
// of 10 a second. The fixed window admits 10 on each side of the boundary;
// the sliding window admits 10 in all; the sliding counter's estimate lets
// one through every 100 ms after the boundary.
func boundaryScene(w io.Writer) error {
	const (
		limit = 10
		every = 25 * time.Millisecond // 4 requests per 100 ms slot
		slot  = 100 * time.Millisecond
		half  = 500 * time.Millisecond
	)
	l := keylimit.PerSecond(limit)
	fixed, err := keylimit.NewFixedWindow[string](l, keylimit.WithClock(demoClock))
	if err != nil {
		return err
	}
	defer fixed.Close()
	sliding, err := keylimit.NewSlidingWindow[string](l, keylimit.WithClock(demoClock))
	if err != nil {
		return err
	}
	defer sliding.Close()
	counter, err := keylimit.NewSlidingCounter[string](l, keylimit.WithClock(demoClock))
	if err != nil {
		return err
	}
	defer counter.Close()
	limiters := []struct {
		name string
		lim  keylimit.Limiter[string]
	}{{"fixed", fixed}, {"sliding", sliding}, {"counter", counter}}

	// Windows are aligned to whole seconds: start half a second before
	// the next boundary at least half a second away.
	now := demoClock.Now()
	boundary := now.Truncate(time.Second).Add(time.Second)
	if boundary.Sub(now) < half {
		boundary = boundary.Add(time.Second)
	}
	start := boundary.Add(-half)
	pause(start.Sub(now))

	// marks[i][s] is limiter i's # (admitted) or . (refused) per request of
	// slot s; first[i] is its first refusal after the boundary.
	slots := int(2 * half / slot)
	marks := make([][]string, len(limiters))
	admitted := make([]int, len(limiters))
	first := make([]keylimit.Result, len(limiters))
	for i := range limiters {
		marks[i] = make([]string, slots)
	}
	for at := time.Duration(0); at < 2*half; at += every {
		if d := start.Add(at).Sub(demoClock.Now()); d > 0 {
			pause(d)
		}
		for i, l := range limiters {
			r := l.lim.Take("client", 1)
			mark := "."
			if r.Allowed {
				mark = "#"
				admitted[i]++
			} else if at >= half && first[i].RetryAfter == 0 {
				first[i] = r
			}
			marks[i][int(at/slot)] += mark
		}
	}

	fmt.Fprintf(w, "limit %d a second; one client sends 4 requests every 100 ms, from 0.5 s before\n", limit)
	fmt.Fprintln(w, "a window boundary to 0.5 s after (# admitted, . refused)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-8s  %-7s  %-7s  %-7s\n", "time", "fixed", "sliding", "counter")
	for s := range slots {
		if time.Duration(s)*slot == half {
			fmt.Fprintln(w, "  ---------- window boundary ----------")
		}
		row := make([]string, len(limiters))
		for i := range limiters {
			row[i] = fmt.Sprintf("%-7s", marks[i][s])
		}
		line := fmt.Sprintf("  %-8s  %s", fmt.Sprintf("%+dms", (time.Duration(s)*slot-half).Milliseconds()), strings.Join(row, "  "))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  fixed:   %d admitted: %d on each side of the boundary, twice the limit in under a second\n", admitted[0], limit)
	fmt.Fprintf(w, "  sliding: %d admitted; after the boundary it answers retry-after %v, when the first leaves its window\n",
		admitted[1], first[1].RetryAfter.Round(10*time.Millisecond))
	fmt.Fprintf(w, "  counter: %d admitted; its estimate counts the previous second's %d as if spread over it\n",
		admitted[2], limit)
	return nil
}
