package main

import (
	"fmt"
	"io"

	"github.com/keylimit/keylimit"
)

func init() {
	register(scene{order: 90, name: "fleet", title: "A fleet of three instances: in-memory limits add up, Redis keeps one", run: fleetScene})
}

// fleetDir is the module of the Redis half of this scene, a module of its
// own inside redislimit's directory, so that this one depends on no Redis
// client, and no published module on the embedded Redis it can run on.
const fleetDir = "redislimit/cmd/fleet-demo"

// fleetRunCommand runs the Redis half of this scene.
var fleetRunCommand = goRunCommand(fleetDir, ".")

// fleetScene: three instances behind a load balancer, each with its own
// in-memory bucket of 10 an hour; alice's 30 requests, spread over them,
// all pass: three times the limit. The Redis limiters keep one count for
// the fleet; their demo needs a Redis client, so it is a command of a
// module of its own, which this scene runs when it can. It runs on
// redis-server when one is installed, else on an embedded Redis.
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
	if !canGoRun(fleetDir) {
		fmt.Fprintf(w, "  With redislimit the fleet shares one count in Redis and admits 10. See it:\n")
		fmt.Fprintf(w, "      %s\n", fleetRunCommand)
		return nil
	}
	fmt.Fprintln(w, "\n  Now the same on Redis, with redislimit's fleet demo:")
	fmt.Fprintf(w, "      %s\n", fleetRunCommand)
	fmt.Fprintln(w, "  go run builds it first (the first time, with a Redis client: up to a minute); it runs")
	fmt.Fprintln(w, "  on a redis-server of its own on 127.0.0.1 if one is installed, else on an embedded")
	fmt.Fprintln(w, "  Redis (miniredis, in Go), and says which.")
	fmt.Fprintln(w)
	return goRun(w, fleetDir, ".")
}
