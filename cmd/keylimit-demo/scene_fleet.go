package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

func init() {
	register(scene{order: 90, name: "fleet", title: "A fleet of three instances: in-memory limits add up, Redis keeps one", run: fleetScene})
}

// fleetRunCommand runs the Redis half of this scene, which lives in the
// redislimit module so that this one does not depend on a Redis client.
const fleetRunCommand = "cd redislimit && go run ./cmd/fleet-demo"

// fleetScene: three instances behind a load balancer, each with its own
// in-memory bucket of 10 an hour; alice's 30 requests, spread over them,
// all pass: three times the limit. The Redis limiters keep one count for
// the fleet; their demo needs redis-server and a Redis client, so it is a
// command of the redislimit module, which this scene runs when it can.
func fleetScene(w io.Writer) error {
	const instances, requests = 3, 30
	var fleet []*keylimit.TokenBucket[string]
	for range instances {
		lim, err := keylimit.NewTokenBucket[string](keylimit.PerHour(10), keylimit.WithClock(demoClock))
		if err != nil {
			return err
		}
		defer lim.Close()
		fleet = append(fleet, lim)
	}
	admitted := 0
	for i := range requests {
		if fleet[i%instances].Allow("alice") {
			admitted++
		}
	}
	fmt.Fprintf(w, "  limit 10/hour per user; alice's %d requests spread over %d instances,\n", requests, instances)
	fmt.Fprintf(w, "  each with an in-memory bucket: %d admitted, %dx the limit.\n", admitted, admitted/10)
	if ran, err := runRedisFleet(w); ran || err != nil {
		return err
	}
	fmt.Fprintf(w, "  With redislimit the fleet shares one count in Redis and admits 10. See it (needs redis-server):\n")
	fmt.Fprintf(w, "      %s\n", fleetRunCommand)
	return nil
}

// runRedisFleet runs the Redis half of the scene, as a command of the
// redislimit module, when it can: redis-server is on PATH and the tour runs
// from the repository's root, where the module is. It reports whether it
// ran. The tests, on a mock clock, leave it to the redislimit module's own.
func runRedisFleet(w io.Writer) (bool, error) {
	if _, mock := demoClock.(*clock.Mock); mock {
		return false, nil
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return false, nil
	}
	if _, err := os.Stat(filepath.Join("redislimit", "go.mod")); err != nil {
		return false, nil
	}
	fmt.Fprintln(w, "\n  redis-server is here, so now the same on Redis, with the redislimit module's demo:")
	fmt.Fprintf(w, "      %s\n", fleetRunCommand)
	fmt.Fprintln(w, "  go run builds it first (the first time, with a Redis client: up to a minute), then")
	fmt.Fprintln(w, "  it starts its own redis-server on 127.0.0.1, and stops it at the end.")
	fmt.Fprintln(w)
	run := exec.Command("go", "run", "./cmd/fleet-demo")
	run.Dir = "redislimit"
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.StdoutPipe()
	if err == nil {
		err = run.Start()
	}
	if err != nil {
		return true, fmt.Errorf("%s: %w", fleetRunCommand, err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	// Until its first line, go run is building: say so every few seconds,
	// so that a cold build never looks like a hang.
	const every = 3 * time.Second
	start, tick := time.Now(), time.NewTicker(every)
	defer tick.Stop()
	building := true
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := run.Wait(); err != nil {
					return true, fmt.Errorf("%s: %w\n%s", fleetRunCommand, err, stderr.String())
				}
				return true, nil
			}
			building = false
			fmt.Fprintf(w, "    %s\n", line)
		case <-tick.C:
			if building {
				fmt.Fprintf(w, "  ... still building (%.0f s)\n", time.Since(start).Seconds())
			}
		}
	}
}
