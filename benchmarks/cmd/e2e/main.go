// Command e2e measures, end to end over loopback, how many requests a
// second a hello-world handler serves on one server core: bare, and behind
// keylimit's httplimit (with its fields on every response, and with
// Config.FieldsOnRefusal: none on these), go-chi/httprate and ulule/limiter,
// each keyed by the client's address under one policy that never refuses,
// and behind floor-two-fields, no limiter but the least a middleware that
// sends a RateLimit field for each request costs. It prints a Markdown table of
// each contender's requests a second and its ratio to bare within each
// round.
//
//	go run ./cmd/e2e                        # from benchmarks/: 3 rounds of 10 s
//	go run ./cmd/e2e -rounds 5 -duration 5s -only bare,keylimit-httplimit
//
// Each contender is served by a fresh process of this command (GOMAXPROCS=1,
// pinned to one CPU with taskset where it is installed), and loaded by wrk
// (the Debian package) pinned to another: wrk, written in C around epoll,
// spends a fraction of what a Go client would on each request, so that one
// core of load is more than one server core can answer, and what is
// measured is the server. Each round runs every contender once, in an order
// that rotates from round to round, so that a change in the machine's load
// falls on all of them alike; read the ratios to bare of one round, not the
// requests a second, which other work on the machine moves.
//
// It is a command, not a test or a benchmark: it takes a minute or more,
// and its figures mean something only on an idle machine.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	serve := flag.String("serve", "", "serve this contender on 127.0.0.1, print its address, and stop when stdin closes (what each round runs)")
	var c config
	flag.IntVar(&c.rounds, "rounds", 3, "rounds: each runs every contender once")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long wrk loads each contender in a round")
	flag.DurationVar(&c.warmup, "warmup", time.Second, "how long wrk loads each server before it is measured")
	flag.IntVar(&c.connections, "connections", 32, "wrk's connections (-c)")
	flag.StringVar(&c.serverCPU, "server-cpu", "0", "the CPU the server is pinned to (taskset -c)")
	flag.StringVar(&c.loadCPU, "load-cpu", "1", "the CPU wrk is pinned to (taskset -c)")
	flag.StringVar(&c.profile, "cpuprofile", "", "a directory for each server's CPU profile of its measured run, <contender>-<round>.pprof (with -serve, the file)")
	only := flag.String("only", "", "the contenders to run, comma-separated (default: all); bare always runs")
	flag.Parse()
	if *serve != "" {
		if err := serveUntilStdinCloses(*serve, c.profile); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		return
	}
	if err := c.choose(*only); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	if err := c.run(os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

// serveUntilStdinCloses serves contender name on a free port of
// 127.0.0.1, says its address on stdout, and returns once stdin closes.
// With a profile file, it writes its CPU profile there from its first line
// on stdin (sent when the measurement starts) until stdin closes.
func serveUntilStdinCloses(name, profile string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var f *os.File
	if profile != "" {
		if f, err = os.Create(profile); err != nil {
			return err
		}
		defer f.Close()
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		in := bufio.NewReader(os.Stdin)
		_, err := in.ReadString('\n')
		profiling := err == nil && f != nil && pprof.StartCPUProfile(f) == nil
		io.Copy(io.Discard, in)
		if profiling {
			pprof.StopCPUProfile()
		}
		stop()
	}()
	fmt.Println(ln.Addr())
	err = serve(ctx, name, ln)
	<-ctx.Done() // the profile is written
	return err
}

// config is what a run measures, and how.
type config struct {
	rounds              int
	duration, warmup    time.Duration
	connections         int
	serverCPU, loadCPU  string
	contenders          []contender
	profile             string // a directory for the servers' CPU profiles, or ""
	wrk, taskset, exe   string
	loadBefore, command string
}

// choose sets the contenders of a run from a comma-separated list of
// names ("" is all).
func (c *config) choose(only string) error {
	if only == "" {
		c.contenders = contenders
		return nil
	}
	c.contenders = []contender{contenders[0]}
	for name := range strings.SplitSeq(only, ",") {
		if name == contenders[0].name {
			continue
		}
		k, err := lookup(name)
		if err != nil {
			return err
		}
		c.contenders = append(c.contenders, k)
	}
	return nil
}

// round is one contender's measurement in one round.
type round struct {
	perSecond float64       // requests a second, as wrk counted them
	cpu       time.Duration // the server's CPU time per request, or 0 if unknown
}

func (c *config) run(out, progress io.Writer) error {
	var err error
	if c.wrk, err = exec.LookPath("wrk"); err != nil {
		return errors.New("wrk is not on PATH: install it (apt-get install wrk) and run again")
	}
	c.taskset, _ = exec.LookPath("taskset") // without it, nothing is pinned
	if c.exe, err = os.Executable(); err != nil {
		return err
	}
	if c.profile != "" {
		if err := os.MkdirAll(c.profile, 0o755); err != nil {
			return err
		}
	}
	c.command = strings.TrimSpace("go run ./cmd/e2e " + strings.Join(os.Args[1:], " "))
	c.loadBefore = loadAverage()
	results := make([][]round, len(c.contenders)) // by contender, then round
	for r := range c.rounds {
		for j := range c.contenders {
			k := (r + j) % len(c.contenders)
			fmt.Fprintf(progress, "round %d/%d: %s\n", r+1, c.rounds, c.contenders[k].name)
			got, err := c.measure(c.contenders[k].name, r)
			if err != nil {
				return fmt.Errorf("%s: %w", c.contenders[k].name, err)
			}
			results[k] = append(results[k], got)
		}
	}
	return c.report(out, results)
}

// measure starts a server of contender name, warms it up, and measures it
// under wrk, in round r.
func (c *config) measure(name string, r int) (round, error) {
	args := []string{c.exe, "-serve", name}
	if c.profile != "" {
		args = append(args, "-cpuprofile", filepath.Join(c.profile, fmt.Sprintf("%s-%d.pprof", name, r+1)))
	}
	if c.taskset != "" {
		args = append([]string{c.taskset, "-c", c.serverCPU}, args...)
	}
	srv := exec.Command(args[0], args[1:]...)
	srv.Env = append(os.Environ(), "GOMAXPROCS=1")
	srv.Stderr = os.Stderr
	stdin, err := srv.StdinPipe()
	if err != nil {
		return round{}, err
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		return round{}, err
	}
	if err := srv.Start(); err != nil {
		return round{}, err
	}
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Process.Kill()
			<-done
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return round{}, fmt.Errorf("the server said no address: %w", err)
	}
	url := "http://" + strings.TrimSpace(line) + "/"
	if err := check(url); err != nil {
		return round{}, err
	}
	if _, err := c.load(url, c.warmup); err != nil {
		return round{}, err
	}
	if _, err := io.WriteString(stdin, "start\n"); err != nil {
		return round{}, err
	}
	cpu0, cpuErr := processCPU(srv.Process.Pid)
	res, err := c.load(url, c.duration)
	if err != nil {
		return round{}, err
	}
	cpu1, err := processCPU(srv.Process.Pid)
	got := round{perSecond: res.perSecond}
	if cpuErr == nil && err == nil && res.requests > 0 {
		got.cpu = (cpu1 - cpu0) / time.Duration(res.requests)
	}
	return got, nil
}

// load runs wrk on url for d, on its own CPU.
func (c *config) load(url string, d time.Duration) (wrkResult, error) {
	args := []string{c.wrk, "-t1", fmt.Sprintf("-c%d", c.connections), fmt.Sprintf("-d%ds", max(int(d.Round(time.Second)/time.Second), 1)), url}
	if c.taskset != "" {
		args = append([]string{c.taskset, "-c", c.loadCPU}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	return parseWrk(string(out))
}
