package main

import (
	"fmt"
	"io"

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
// the fleet; their demo needs redis-server, so it is a command of its own.
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
	fmt.Fprintf(w, "  With redislimit the fleet shares one count in Redis and admits 10. See it (needs redis-server):\n")
	fmt.Fprintf(w, "      %s\n", fleetRunCommand)
	return nil
}
