package main

import (
	"fmt"
	"io"
	"os/exec"

	"github.com/keylimit/keylimit"
)

func init() {
	register(scene{order: 90, name: "fleet", title: "A fleet of three instances: in-memory limits add up, Redis keeps one", run: fleetScene})
}

// fleetRunCommand runs the Redis half of this scene, which lives in the
// redislimit module so that this one does not depend on a Redis client.
var fleetRunCommand = goRunCommand("redislimit", "./cmd/fleet-demo")

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

// runRedisFleet runs the Redis half of the scene, the redislimit module's
// fleet-demo, when it can (canGoRun) and redis-server is on PATH. It
// reports whether it ran.
func runRedisFleet(w io.Writer) (bool, error) {
	if !canGoRun("redislimit") {
		return false, nil
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return false, nil
	}
	fmt.Fprintln(w, "\n  redis-server is here, so now the same on Redis, with the redislimit module's demo:")
	fmt.Fprintf(w, "      %s\n", fleetRunCommand)
	fmt.Fprintln(w, "  go run builds it first (the first time, with a Redis client: up to a minute), then")
	fmt.Fprintln(w, "  it starts its own redis-server on 127.0.0.1, and stops it at the end.")
	fmt.Fprintln(w)
	return true, goRun(w, "redislimit", "./cmd/fleet-demo")
}
