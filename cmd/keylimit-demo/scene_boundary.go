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
// one through every 100 ms after the boundary. Every request is sent within
// one second, so each limiter's count is its most in any second.
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
	// slot s; admitted[i] are the times it admitted at; first[i] is its
	// first refusal after the boundary.
	slots := int(2 * half / slot)
	marks := make([][]string, len(limiters))
	admitted := make([][]time.Duration, len(limiters))
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
				admitted[i] = append(admitted[i], at)
			} else if at >= half && first[i].RetryAfter == 0 {
				first[i] = r
			}
			marks[i][int(at/slot)] += mark
		}
	}

	fmt.Fprintf(w, "Limit %d a second; one client sends 4 requests every 100 ms, from 0.5 s before a window\n", limit)
	fmt.Fprintln(w, "boundary (a whole second, where a fixed window starts counting again) to 0.5 s after.")
	fmt.Fprintln(w, "(# admitted, . refused)")
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
	// verdict: "14 in 0.9 s: 40% over 10/s", from the first admission to the last.
	verdict := func(at []time.Duration) string {
		span := at[len(at)-1] - at[0]
		return fmt.Sprintf("%d in %.1f s: %s", len(at), span.Seconds(), overBy(len(at), limit, "s"))
	}
	before := 0 // the fixed window's admissions before the boundary
	for _, at := range admitted[0] {
		if at < half {
			before++
		}
	}
	fmt.Fprintf(w, "  fixed:   %s. Each window counts only its own:\n", verdict(admitted[0]))
	fmt.Fprintf(w, "           %d just before the boundary, %d just after.\n", before, len(admitted[0])-before)
	fmt.Fprintf(w, "  sliding: %s. After the boundary it answers retry-after %v:\n", verdict(admitted[1]), first[1].RetryAfter.Round(10*time.Millisecond))
	fmt.Fprintln(w, "           then the first admission is a second old, and a request can pass again.")
	fmt.Fprintf(w, "  counter: %s. It keeps two counts, not a log of times:\n", verdict(admitted[2]))
	fmt.Fprintf(w, "           it takes the previous second's %d as spread evenly over it, so after\n", limit)
	fmt.Fprintln(w, "           the boundary it lets one in every 100 ms.")
	return nil
}
