package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
)

func init() {
	register(scene{order: 10, name: "bucket", title: "Three users, one token bucket each: capacity 5, refilling 1 a second", run: bucketScene})
}

// bucketScene: alice, bob and charlie each fire 8 rapid requests at a bucket
// of 5 refilling 1/s: 5 pass and 3 are refused for each. After 3 s each has
// 3 tokens again.
func bucketScene(w io.Writer) error {
	const capacity = 5
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(capacity), keylimit.WithClock(demoClock))
	if err != nil {
		return err
	}
	defer lim.Close()
	users := []string{"alice", "bob", "charlie"}
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

	fmt.Fprintf(w, "Each user's bucket holds %d tokens; a request takes one, and one comes back each second.\n", capacity)
	explained := false
	fire := func(n int) {
		for _, u := range users {
			had := lim.Peek(u).Remaining
			var marks []string
			passed := 0
			var last keylimit.Result
			for range n {
				last = lim.Take(u, 1)
				if last.Allowed {
					passed++
					marks = append(marks, "ok")
				} else {
					marks = append(marks, "no")
				}
			}
			fmt.Fprintf(w, "  %-8s %s   had %s: %d accepted, %d refused\n", u, strings.Join(marks, " "), plural(had, "token"), passed, n-passed)
			fmt.Fprintf(w, "           then remaining=%d retry-after=%v reset-after=%v\n", last.Remaining, round(last.RetryAfter), round(last.ResetAfter))
			if !explained {
				fmt.Fprintln(w, "           (retry-after: until the next request can pass, one token back;")
				fmt.Fprintf(w, "            reset-after: until the bucket is full again, all %d back)\n", capacity)
				explained = true
			}
		}
	}

	fmt.Fprintf(w, "\n%d rapid requests each (ok accepted, no refused):\n", 8)
	fire(8)
	const wait = 3 * time.Second
	fmt.Fprintf(w, "\nwaiting %v: one token a second comes back...\n", wait)
	pause(wait)
	for _, u := range users {
		r := lim.Peek(u)
		fmt.Fprintf(w, "  %-8s remaining=%d reset-after=%v: %s back in %v, full again %v later\n",
			u, r.Remaining, round(r.ResetAfter), plural(r.Remaining, "token"), wait, round(r.ResetAfter))
	}
	fmt.Fprintf(w, "\n%d rapid requests each again:\n", 8)
	fire(8)
	return nil
}
