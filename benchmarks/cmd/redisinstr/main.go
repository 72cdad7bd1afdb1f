// Command redisinstr counts the instructions redis-server spends in the
// script of one decision, for redis_rate and redislimit's three types, each
// built as a user builds it (WithPrefix, and a timeout that a server under
// valgrind meets), under BenchmarkRedisCPU's loose limit (a billion a
// second with a burst of a billion: every decision an admission).
//
//	go run ./cmd/redisinstr                  # from benchmarks/: 4,000 calls a row
//	go run ./cmd/redisinstr -n 1000 -only slidingwindow
//	go run ./cmd/redisinstr -limit 100       # 100 a second, a burst of 100
//	go run ./cmd/redisinstr -inflight 16     # 16 takes under way at once
//	go run ./cmd/redisinstr -n 2000 -scripts cmd/redisinstr/commands/*.lua
//
// Each contender and each case runs on a redis-server of its own under
// callgrind, which counts only inside evalShaCommand (valgrind
// --tool=callgrind --toggle-collect=evalShaCommand): the script and the
// commands it runs, not the networking. Two cases: fresh, n takes of n
// distinct keys without state (the common case of a loose limit whose keys
// come back after a period); again, each of those keys taken twice in a
// row, the second take within a period of the first (the steady state of a
// key that comes back sooner), whose figure is the instructions of the
// second take: (again's total - fresh's) / n. The figures are per
// decision (a take); the script calls per decision are counted from INFO
// commandstats (evalsha), so the first one, which finds the script not
// loaded, is counted too.
//
// With -scripts it counts Lua files instead, each run n times on distinct
// keys: commands/ holds one per command or Lua operation the scripts use,
// over a fixture (set-px: a log written; lua-10-*: an operation ten times),
// so that the difference between two is what the command or operation
// costs (BENCHMARKS.md, "What a script's parts cost").
//
// With -inflight k the takes of each case are made k at a time, as
// BenchmarkRedisCPU's 64 in flight make them: a limiter's takes then
// share script calls (redislimit's lua/take_batch.lua), and the figures
// are per decision, with the script calls per decision beside them. (A
// key's two takes stay in order.)
//
// Instructions do not move with the machine's load, as time does: this is
// the figure to compare contenders by on a shared machine (BENCHMARKS.md).
// valgrind must be installed.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// running is the server under valgrind, if one runs: a fatal error
// stops it.
var running *exec.Cmd

// limit is BenchmarkRedisCPU's cpuLimit, unless -limit sets another.
var limit = keylimit.Per(1_000_000_000, time.Second).WithBurst(1_000_000_000)

func main() {
	n := flag.Int("n", 4000, "takes of distinct keys per case")
	server := flag.String("server", "redis-server", "the server binary")
	only := flag.String("only", "", "comma-separated contenders (redis_rate, bucket, fixedwindow, slidingwindow); all if empty")
	keep := flag.String("keep", "", "a directory to keep callgrind's files in (for callgrind_annotate); none kept if empty")
	perSecond := flag.Int("limit", 0, "events a second, with a burst of as many (0: BenchmarkRedisCPU's billion); "+
		"at a limit a take moves, redis_rate's script writes too")
	scripts := flag.Bool("scripts", false, "count the scripts named by the arguments (Lua files) instead: each run n times, "+
		"once on each of n keys, with -argv as ARGV")
	argv := flag.String("argv", "", "the ARGV of -scripts, separated by spaces")
	flag.IntVar(&inflight, "inflight", 1, "takes under way at once, on distinct keys")
	flag.Parse()
	dir := *keep
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "redisinstr-"); err != nil {
			fatalf("%v", err)
		}
		defer os.RemoveAll(dir)
	}
	if *scripts {
		countScripts(flag.Args(), *server, *n, strings.Fields(*argv), dir)
		return
	}
	if *perSecond < 0 {
		fatalf("-limit %d is negative", *perSecond)
	}
	if *perSecond > 0 {
		limit = keylimit.PerSecond(*perSecond).WithBurst(*perSecond)
	}
	names := []string{"redis_rate", "bucket", "fixedwindow", "slidingwindow"}
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	if inflight < 1 {
		fatalf("-inflight %d: at least 1", inflight)
	}
	fmt.Printf("| contender | fresh instructions/decision | again (second take) | next window (second take) | script calls/decision |\n|---|---:|---:|---:|---:|\n")
	for _, name := range names {
		fresh, freshCalls := count(dir, *server, name, *n, fresh)
		again, againCalls := count(dir, *server, name, *n, again)
		next, nextCalls := count(dir, *server, name, *n, nextWindow)
		second := func(total int64) float64 { return float64(total-fresh) / float64(*n) / 1000 }
		fmt.Printf("| %s | %.1fk | %.1fk | %.1fk | %.2f, %.2f, %.2f |\n", name, float64(fresh)/float64(*n)/1000, second(again), second(next),
			float64(freshCalls)/float64(*n), float64(againCalls-freshCalls)/float64(*n), float64(nextCalls-freshCalls)/float64(*n))
	}
}

// inflight is -inflight: how many takes are under way at once.
var inflight = 1

// each calls f on every key, inflight at a time, and returns when all
// have returned.
func each(keys []string, f func(string)) {
	if inflight == 1 {
		for _, key := range keys {
			f(key)
		}
		return
	}
	next := make(chan string)
	var wg sync.WaitGroup
	for range inflight {
		wg.Go(func() {
			for key := range next {
				f(key)
			}
		})
	}
	for _, key := range keys {
		next <- key
	}
	close(next)
	wg.Wait()
}

// The cases: each key taken once (fresh); twice in a row (again); or
// once late in a second of Redis's clock and again early in the next
// (nextWindow), in batches of nextBatch keys: the first take of a window
// that finds the state of the window before it, which a fixed window's
// state outlives by up to a period (take.go's freshLinger).
const (
	fresh = iota
	again
	nextWindow
)

// nextBatch is the keys taken in a second's last 300 ms: under valgrind a
// call takes about a millisecond.
const nextBatch = 50

// count runs n decisions of contender name (each key twice in the cases
// again and nextWindow) on a fresh server under callgrind, and returns the
// instructions counted in evalShaCommand and the EVALSHA calls.
func count(dir, server, name string, n int, mode int) (int64, int64) {
	out := filepath.Join(dir, fmt.Sprintf("cg.%s.%d", name, mode))
	client := startServer(server, out)
	allow := contender(client, name)
	take := func(key string) {
		if !allow(key) {
			fatalf("%s: a take of %s refused (each key is taken at most twice: -limit must be at least 2)", name, key)
		}
	}
	for i := 0; i < n; i += nextBatch {
		keys := make([]string, 0, nextBatch)
		for j := i; j < min(i+nextBatch, n); j++ {
			keys = append(keys, "k"+strconv.Itoa(j))
		}
		if mode != nextWindow {
			each(keys, func(key string) {
				take(key)
				if mode == again {
					take(key)
				}
			})
			continue
		}
		// Begin in the last 300 ms of a second of Redis's clock, end
		// before it ends, take again in the first 300 ms of the next.
		second := untilInSecond(client, 700*time.Millisecond)
		each(keys, take)
		if serverTime(client).Unix() != second {
			fatalf("%s: %d takes did not end within the 300 ms left of a second", name, len(keys))
		}
		untilInSecond(client, 0)
		each(keys, take)
		if serverTime(client).Sub(time.Unix(second+1, 0)) > 300*time.Millisecond {
			fatalf("%s: %d takes did not end within 300 ms of a window's start", name, len(keys))
		}
	}
	calls := evalshaCalls(client)
	stopServer(client, server)
	return totals(out), calls
}

// countScripts prints the instructions per call of each script in files,
// run n times on a server of its own under callgrind, on keys k0 to k(n-1),
// with argv, callgrind writing its files in dir. The cost of a command or
// a Lua operation is the difference between two scripts that differ by it
// (commands/: BENCHMARKS.md).
func countScripts(files []string, server string, n int, argv []string, dir string) {
	if len(files) == 0 {
		fatalf("-scripts: name the Lua files to count")
	}
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	fmt.Printf("| script | instructions/call |\n|---|---:|\n")
	for i, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			fatalf("%v", err)
		}
		out := filepath.Join(dir, fmt.Sprintf("cg.script.%d", i))
		client := startServer(server, out)
		ctx := context.Background()
		sha, err := client.ScriptLoad(ctx, string(src)).Result()
		if err != nil {
			fatalf("%s: %v", file, err)
		}
		for j := 0; j < n; j += 100 {
			pipe := client.Pipeline()
			for k := j; k < min(j+100, n); k++ {
				pipe.EvalSha(ctx, sha, []string{"k" + strconv.Itoa(k)}, args...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				fatalf("%s: %v", file, err)
			}
		}
		calls := evalshaCalls(client)
		stopServer(client, server)
		fmt.Printf("| %s | %.2fk |\n", filepath.Base(file), float64(totals(out))/float64(calls)/1000)
	}
}

// startServer starts server on a free port under callgrind, which writes
// its counts to out, and returns a client of it once it answers.
func startServer(server, out string) *redis.Client {
	port, err := redisserver.FreePort()
	if err != nil {
		fatalf("%v", err)
	}
	cmd := exec.Command("valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand", "--callgrind-out-file="+out,
		server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
	}
	running = cmd
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadTimeout: time.Minute, WriteTimeout: time.Minute, ContextTimeoutEnabled: true})
	for start := time.Now(); client.Ping(context.Background()).Err() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 2*time.Minute {
			fatalf("%s under valgrind did not answer", server)
		}
	}
	return client
}

// stopServer shuts the server of client down, the one startServer left
// running (one runs at a time), and waits for callgrind to write its
// counts.
func stopServer(client *redis.Client, server string) {
	client.Shutdown(context.Background()) // its reply is the connection's end
	client.Close()
	if err := running.Wait(); err != nil {
		fatalf("%s under valgrind: %v", server, err)
	}
	running = nil
}

// contender returns the decision of contender name on client.
func contender(client *redis.Client, name string) func(string) bool {
	opts := []redislimit.Option{redislimit.WithPrefix("cpu:" + name + ":"), redislimit.WithTimeout(time.Minute)}
	var lim interface{ Allow(string) bool }
	var err error
	switch name {
	case "redis_rate":
		rr := redis_rate.NewLimiter(client)
		rl := redis_rate.Limit{Rate: limit.Events, Burst: limit.BurstSize(), Period: limit.Period}
		return func(key string) bool {
			res, err := rr.Allow(context.Background(), key, rl)
			return err == nil && res.Allowed > 0
		}
	case "bucket":
		lim, err = redislimit.NewTokenBucket(client, "cpu", limit, opts...)
	case "fixedwindow":
		lim, err = redislimit.NewFixedWindow(client, "cpu", limit, opts...)
	case "slidingwindow":
		lim, err = redislimit.NewSlidingWindow(client, "cpu", limit, opts...)
	default:
		fatalf("no contender %q", name)
	}
	if err != nil {
		fatalf("%v", err)
	}
	return lim.Allow
}

// serverTime returns Redis's clock.
func serverTime(client *redis.Client) time.Time {
	t, err := client.Time(context.Background()).Result()
	if err != nil {
		fatalf("%v", err)
	}
	return t
}

// untilInSecond waits until Redis's clock is at within a second: this
// second's if that is less than 100 ms ago, the next one's otherwise (so
// always the next second's start for 0). It returns that second.
func untilInSecond(client *redis.Client, at time.Duration) int64 {
	now := serverTime(client)
	second := now.Truncate(time.Second)
	target := second.Add(at)
	if at == 0 || !now.Before(target.Add(100*time.Millisecond)) {
		target = target.Add(time.Second)
	}
	time.Sleep(target.Sub(now))
	return target.Unix()
}

// evalshaCalls returns the EVALSHA calls INFO commandstats counts.
func evalshaCalls(client *redis.Client) int64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		fatalf("%v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				fatalf("%v", err)
			}
			return v
		}
	}
	fatalf("no EVALSHA in INFO commandstats")
	return 0
}

// totals reads the instructions of a callgrind output file.
func totals(file string) int64 {
	f, err := os.Open(file)
	if err != nil {
		fatalf("%v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "totals: "); ok {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				fatalf("%v", err)
			}
			return v
		}
	}
	fatalf("no totals in %s", file)
	return 0
}

// fatalf stops the server that runs, if any, and exits with the message.
func fatalf(format string, v ...any) {
	if running != nil && running.Process != nil {
		running.Process.Kill()
	}
	log.Fatalf(format, v...)
}
