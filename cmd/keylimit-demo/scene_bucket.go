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
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(5), keylimit.WithClock(demoClock))
	if err != nil {
		return err
	}
	defer lim.Close()
	users := []string{"alice", "bob", "charlie"}

	fire := func(n int) error {
		for _, u := range users {
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
			fmt.Fprintf(w, "  %-8s %s\n", u, strings.Join(marks, " "))
			fmt.Fprintf(w, "           %d accepted, %d refused; last: remaining=%d retry-after=%v reset-after=%v\n",
				passed, n-passed, last.Remaining, last.RetryAfter.Round(100*time.Millisecond), last.ResetAfter.Round(100*time.Millisecond))
		}
		return nil
	}

	fmt.Fprintln(w, "8 rapid requests each:")
	if err := fire(8); err != nil {
		return err
	}
	const wait = 3 * time.Second
	fmt.Fprintf(w, "\nwaiting %v: one token a second comes back...\n", wait)
	pause(wait)
	for _, u := range users {
		r := lim.Peek(u)
		fmt.Fprintf(w, "  %-8s remaining=%d reset-after=%v\n", u, r.Remaining, r.ResetAfter.Round(100*time.Millisecond))
	}
	fmt.Fprintln(w, "\n8 rapid requests each again:")
	return fire(8)
}
