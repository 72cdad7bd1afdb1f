// Command fleet-demo shows why a fleet needs one count: three instances of a
// service behind a load balancer, with in-memory keylimit limiters, let a
// user through three times the limit; with redislimit limiters sharing one
// Redis, once. Then the same three with leases (WithLeases) hammer one key:
// the global limit holds, at in-process speed, with a Redis call per
// lease rather than per request.
//
// It needs nothing installed. With redis-server on PATH it starts one on a
// free port of 127.0.0.1, its append-only file in a temporary directory,
// and stops it (and removes the directory) when done;
// without, it runs an embedded Redis, miniredis (a Redis in Go, with Lua),
// in its own process. It says which. -redis=server or -redis=embedded
// chooses:
//
//	cd redislimit/cmd/fleet-demo && go run .
//
// It is a module of its own, never published, so that no published module
// depends on miniredis.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

func main() {
	which := flag.String("redis", "auto", "the Redis to run on: server (redis-server, from PATH), embedded (miniredis), or auto: server if installed")
	flag.Parse()
	if err := run(os.Stdout, *which); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-demo:", err)
		os.Exit(1)
	}
}

// run starts the Redis which names (see main), shows the fleet on it, and
// stops it.
func run(w io.Writer, which string) error {
	why := "-redis=" + which + ":" // why the embedded Redis, if it is
	if which == "auto" {
		which, why = "embedded", "redis-server is not installed:"
		if redisserver.Installed() {
			which = "server"
		}
	}
	var addr string
	switch which {
	case "server":
		if !redisserver.Installed() {
			return errors.New("-redis=server needs redis-server, and " + redisserver.InstallHint)
		}
		srv, err := redisserver.StartAppendOnly(0) // keeps its data on disk, as Ping checks
		if err != nil {
			return err
		}
		defer srv.Stop()
		addr = srv.Addr
		fmt.Fprintf(w, "redis-server started on %s (it stops when the demo ends)\n\n", addr)
	case "embedded":
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
		fmt.Fprintf(w, "%s an embedded Redis runs in this process, on %s:\n", why, addr)
		fmt.Fprintln(w, "miniredis, a Redis in Go that runs the same Lua scripts. It decides as redis-server")
		fmt.Fprint(w, "does; its speed is its own.")
		if why != "-redis=embedded:" {
			fmt.Fprint(w, " (With redis-server on PATH, the demo starts one instead.)")
		}
		fmt.Fprint(w, "\n\n")
	default:
		return fmt.Errorf("-redis=%s: want server, embedded or auto", which)
	}
	return show(w, addr)
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
		c := newClient(addr)
		lim, err := build(c)
		return lim, c, err
	}
}

// scripts counts the script calls (EVALSHA and EVAL) the demo's clients
// send, which every Redis answers; redis-server's INFO commandstats would
// count them too, but miniredis keeps no such count.
var scripts atomic.Int64

// newClient returns a client of the Redis at addr that counts its script
// calls in scripts.
func newClient(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c.AddHook(scriptCounter{})
	return c
}

// scriptCounter is a go-redis hook that counts script calls.
type scriptCounter struct{}

func (scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		countScript(cmd)
		return next(ctx, cmd)
	}
}

func (scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			countScript(cmd)
		}
		return next(ctx, cmds)
	}
}

func countScript(cmd redis.Cmder) {
	if name := cmd.Name(); name == "evalsha" || name == "eval" {
		scripts.Add(1)
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
	return showLeases(w, addr)
}

// The leases scene: each instance hammers one key from hammerers goroutines
// for hammerFor, under hotLimit, with leases of leaseTime.
const (
	hammerers = 4
	hammerFor = 500 * time.Millisecond
	leaseTime = 20 * time.Millisecond
)

var hotLimit = keylimit.PerSecond(10_000)

// showLeases runs the leases scene against the Redis server at addr: the
// fleet's admissions beside the bound of the limit, the script calls Redis
// ran, and what an admitted call costs with leases, in memory, and on Redis
// without.
func showLeases(w io.Writer, addr string) error {
	fmt.Fprintf(w, "\nWith leases (WithLeases(%v)), the %d instances hammer one key limited to %v for %v,\n",
		leaseTime, instances, hotLimit, hammerFor)
	fmt.Fprintf(w, "%d goroutines each:\n", hammerers)
	ctx := context.Background()
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	var fleet []*redislimit.TokenBucket
	for range instances {
		c := newClient(addr)
		defer c.Close()
		lim, err := redislimit.NewTokenBucket(c, "fleet-demo-hot", hotLimit, append(redisOptions, redislimit.WithLeases(leaseTime))...)
		if err != nil {
			return err
		}
		if err := lim.Ping(ctx); err != nil {
			return err
		}
		fleet = append(fleet, lim)
	}
	key := fmt.Sprintf("hot-%d", time.Now().UnixNano())
	before := scripts.Load()
	start, err := stats.Time(ctx).Result()
	if err != nil {
		return err
	}
	admitted := hammer(fleet, key)
	end, err := stats.Time(ctx).Result()
	if err != nil {
		return err
	}
	for _, lim := range fleet {
		lim.Close()
	}
	calls := max(scripts.Load()-before, 1)
	bound := int64(hotLimit.BurstSize()) + int64(end.Sub(start)/hotLimit.WithBurst(1).FillTime())
	fmt.Fprintf(w, "  admitted %d of at most %d (burst + rate × %v on Redis's clock), %.0f%%,\n",
		admitted, bound, end.Sub(start).Round(time.Millisecond), 100*float64(admitted)/float64(bound))
	fmt.Fprintf(w, "  with %d Redis script calls: one per %d admitted.\n", calls, admitted/calls)
	leased, memory, plain, err := costs(addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  An admitted call took %v from a lease (in memory: %v; on Redis without leases: %v).\n",
		leased.Round(time.Nanosecond), memory.Round(time.Nanosecond), plain.Round(time.Microsecond))
	return nil
}

// hammer calls Allow(key) on each of fleet from hammerers goroutines each
// for hammerFor, and returns the events admitted.
func hammer(fleet []*redislimit.TokenBucket, key string) int64 {
	var admitted atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, lim := range fleet {
		for range hammerers {
			wg.Go(func() {
				n := int64(0)
				for !stop.Load() {
					if lim.Allow(key) {
						n++
					}
				}
				admitted.Add(n)
			})
		}
	}
	time.Sleep(hammerFor)
	stop.Store(true)
	wg.Wait()
	return admitted.Load()
}

// costs times an admitted Allow on one key under a limit no call reaches:
// from a lease, in memory, and on Redis without leases.
func costs(addr string) (leased, memory, plain time.Duration, err error) {
	high := keylimit.PerSecond(1_000_000_000)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	lease, err := redislimit.NewTokenBucket(c, "fleet-demo-cost", high, append(redisOptions, redislimit.WithLeases(time.Second))...)
	if err != nil {
		return 0, 0, 0, err
	}
	defer lease.Close()
	mem, err := keylimit.NewTokenBucket[string](high)
	if err != nil {
		return 0, 0, 0, err
	}
	defer mem.Close()
	red, err := redislimit.NewTokenBucket(c, "fleet-demo-cost-plain", high, redisOptions...)
	if err != nil {
		return 0, 0, 0, err
	}
	per := func(lim keylimit.Limiter[string], calls int) time.Duration {
		for range calls / 10 { // the key's first calls: a lease grows to what the key spends
			lim.Allow("cost")
		}
		start := time.Now()
		for range calls {
			lim.Allow("cost")
		}
		return time.Since(start) / time.Duration(calls)
	}
	return per(lease, 200_000), per(mem, 200_000), per(red, 300), nil
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
