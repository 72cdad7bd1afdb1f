// Command fleet-demo shows why a fleet needs one count: three instances of a
// service behind a load balancer, with in-memory keylimit limiters, let a
// user through three times the limit; with redislimit limiters sharing one
// Redis, once.
//
// It starts its own redis-server (found on PATH) on a free port of
// 127.0.0.1, keeps nothing on disk, and stops it when done:
//
//	cd redislimit && go run ./cmd/fleet-demo
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-demo:", err)
		os.Exit(1)
	}
}

// run starts a redis-server, shows the fleet on it, and stops it.
func run(w io.Writer) error {
	if !redisserver.Installed() {
		return errors.New("this demo needs redis-server, and " + redisserver.InstallHint)
	}
	srv, err := redisserver.Start(0)
	if err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Fprintf(w, "redis-server started on %s (it stops when the demo ends)\n\n", srv.Addr)
	return show(w, srv.Addr)
}

// The scenario: a limit of 10 an hour per user; alice sends 30 requests
// at once, which the load balancer spreads over the three instances. (An
// hour, so that the requests all fall in one fixed window.)
const (
	instances = 3
	requests  = 30
)

var limit = keylimit.PerHour(10)

// newFunc builds one instance's limiter, and what to close when done with
// it; addr is the Redis server's.
type newFunc func(addr string) (keylimit.Limiter[string], io.Closer, error)

// rows are the lines of the table: each kind of limiter, in memory and in
// Redis.
var rows = []struct {
	name string
	new  newFunc
}{
	{"in-memory TokenBucket", func(string) (keylimit.Limiter[string], io.Closer, error) {
		lim, err := keylimit.NewTokenBucket[string](limit)
		return lim, lim, err
	}},
	{"redislimit TokenBucket", redisLimiter(func(c redis.UniversalClient) (keylimit.Limiter[string], error) {
		return redislimit.NewTokenBucket(c, "fleet-demo", limit, redisOptions...)
	})},
	{"in-memory FixedWindow", func(string) (keylimit.Limiter[string], io.Closer, error) {
		lim, err := keylimit.NewFixedWindow[string](limit)
		return lim, lim, err
	}},
	{"redislimit FixedWindow", redisLimiter(func(c redis.UniversalClient) (keylimit.Limiter[string], error) {
		return redislimit.NewFixedWindow(c, "fleet-demo", limit, redisOptions...)
	})},
	{"in-memory SlidingWindow", func(string) (keylimit.Limiter[string], io.Closer, error) {
		lim, err := keylimit.NewSlidingWindow[string](limit)
		return lim, lim, err
	}},
	{"redislimit SlidingWindow", redisLimiter(func(c redis.UniversalClient) (keylimit.Limiter[string], error) {
		return redislimit.NewSlidingWindow(c, "fleet-demo", limit, redisOptions...)
	})},
}

// failures counts the decisions Redis did not make (a timeout on a busy
// machine, say): the fallback made them, and the demo says so.
var failures atomic.Int64

// redisOptions are the demo's: a patient timeout, since a busy machine must
// not turn the demo into a demo of the failure policy, and a count of any
// failure all the same; the fleet's size, so that if Redis failed each
// instance would decide alone on a third of the limit.
var redisOptions = []redislimit.Option{
	redislimit.WithTimeout(5 * time.Second),
	redislimit.WithFleetSize(instances),
	redislimit.WithOnError(func(error) { failures.Add(1) }),
}

// redisLimiter gives each instance a client of its own, as separate
// processes would have.
func redisLimiter(build func(redis.UniversalClient) (keylimit.Limiter[string], error)) newFunc {
	return func(addr string) (keylimit.Limiter[string], io.Closer, error) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		lim, err := build(c)
		return lim, c, err
	}
}

// show runs the scenario for every row against the Redis server at addr
// and prints a table of what each instance admitted.
func show(w io.Writer, addr string) error {
	fmt.Fprintf(w, "%d instances behind a load balancer; limit %d an hour per user.\n", instances, limit.Events)
	fmt.Fprintf(w, "alice sends %d requests at once, spread evenly over the instances.\n\n", requests)
	fmt.Fprintf(w, "%-26s", "admitted by")
	for i := range instances {
		fmt.Fprintf(w, " instance %d", i+1)
	}
	fmt.Fprintf(w, "   fleet\n")
	for _, row := range rows {
		var fleet []keylimit.Limiter[string]
		for range instances {
			lim, closer, err := row.new(addr)
			if err != nil {
				return fmt.Errorf("%s: %w", row.name, err)
			}
			defer closer.Close()
			fleet = append(fleet, lim)
		}
		counts := fire(fleet, fmt.Sprintf("alice-%d", time.Now().UnixNano()))
		total := 0
		fmt.Fprintf(w, "%-26s", row.name)
		for _, n := range counts {
			fmt.Fprintf(w, " %10d", n)
			total += n
		}
		fmt.Fprintf(w, "   %5d  %s\n", total, times(total))
	}
	if n := failures.Load(); n > 0 {
		fmt.Fprintf(w, "\n(Redis failed %d times: the in-process fallback decided those requests.)\n", n)
	}
	fmt.Fprintf(w, "\nIn memory, each instance keeps its own count: the fleet admits %d times the limit.\n", instances)
	fmt.Fprintln(w, "On Redis, one Lua script per decision keeps one count for the fleet: the limit, exactly.")
	return nil
}

// fire sends the requests for key concurrently, each instance taking its
// share from goroutines of its own, and returns how many each admitted.
func fire(fleet []keylimit.Limiter[string], key string) []int {
	counts := make([]atomic.Int64, len(fleet))
	var wg sync.WaitGroup
	for i := range requests {
		lim := fleet[i%len(fleet)]
		wg.Go(func() {
			if lim.Allow(key) {
				counts[i%len(fleet)].Add(1)
			}
		})
	}
	wg.Wait()
	out := make([]int, len(fleet))
	for i := range counts {
		out[i] = int(counts[i].Load())
	}
	return out
}

// times says the total as a multiple of the limit: "3x the limit".
func times(total int) string {
	x := float64(total) / float64(limit.Events)
	return strings.TrimSuffix(fmt.Sprintf("%.1f", x), ".0") + "x the limit"
}
