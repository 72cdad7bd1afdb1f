// Command overload puts a server of known capacity under overload, behind
// each of several limits in turn, and says which of issue 40's targets each
// one meets.
//
//	go run ./cmd/overload                      # from benchmarks/: 20 s a variant
//	go run ./cmd/overload -duration 10s -only no-limit,static-2x-low -plot /tmp/o.svg
//
// The server, on a free port of 127.0.0.1, is a pool of 8 workers, each
// serving a request in 10 ms (a sleep, so that the machine's CPUs are not
// what limits it: 800 requests a second), with a first-come-first-served
// queue of up to 1,000 requests behind them. Halfway through the run 4 of
// its workers go (400 a second). The load is open-loop: requests at 1.5×
// the first capacity, sent at their times whatever the answers, from 4
// tenants (X-Tenant: t0 sends 10 times what each of t1-t3 does), 10% of
// them critical (X-Criticality: critical); the client waits 1 s for an
// answer.
//
// Each variant stands in front of a fresh server: no limit; a concurrency
// limit per tenant (quota.Concurrent through httplimit) of twice and of half
// the server's workers; and the adaptive limiters. For each, and for each
// half of its run, the table gives the goodput (requests answered 200 within
// the client's timeout, over the capacity), the p50 and p99 latency of the
// admitted requests against the latency of requests sent one at a time to
// the idle server, how long after the drop goodput is back within 10% of
// the new capacity, each tenant's requests served over those it sent, and
// the critical requests served. Then the client side: a partner that fails
// every request for 5 s, and what httplimit.Transport sends it.
//
// It checks issue 40's targets and prints PASS or FAIL for each, and
// writes an SVG plot of each variant's goodput, limit and p99 over time.
// It is a command, not a test: it takes a minute or more, and on a loaded
// machine the latencies move with the load (the table says the load average).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

func main() {
	c := config{weights: []int{10, 1, 1, 1}, seed: 1, sampleEvery: 50 * time.Millisecond}
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long each variant is loaded; the capacity halves at half of it")
	flag.IntVar(&c.workers, "workers", 8, "the server's workers before the drop")
	flag.IntVar(&c.workersAfter, "workers-after", 4, "the server's workers after the drop")
	flag.DurationVar(&c.service, "service", 10*time.Millisecond, "the time a worker takes for a request")
	flag.IntVar(&c.queue, "queue", 1000, "the most requests waiting for a worker; beyond, 503 at once")
	flag.Float64Var(&c.load, "load", 1.5, "the arrival rate, as a multiple of the capacity before the drop")
	flag.DurationVar(&c.timeout, "timeout", time.Second, "how long the client waits for an answer")
	flag.IntVar(&c.critical, "critical", 100, "critical requests per 1000")
	flag.BoolVar(&c.poisson, "poisson", false, "Poisson arrivals (exponential gaps) instead of evenly spaced ones")
	flag.Uint64Var(&c.seed, "seed", 1, "the seed of the Poisson gaps")
	only := flag.String("only", "", "the variants to run, comma-separated (default: all)")
	plot := flag.String("plot", "testdata/overload.svg", "where to write the SVG plot (\"\" for none)")
	csv := flag.String("csv", "", "where to write the plot's series as CSV, a row per variant and 250 ms (\"\" for none)")
	var cc clientConfig
	flag.DurationVar(&cc.failFor, "client-fail", 5*time.Second, "how long the partner fails every request, in the client-side run (0 skips it)")
	flag.Float64Var(&cc.rate, "client-rate", 200, "the client's requests a second to the partner")
	flag.IntVar(&cc.k, "client-k", 2, "K of the throttling formula the client side is judged against")
	flag.DurationVar(&cc.window, "client-window", 250*time.Millisecond, "the Transport's ThrottleWindow, and the time constant of the formula's decaying counts")
	flag.DurationVar(&cc.healthy, "client-healthy", 3*time.Second, "how long the partner is healthy before the failure, and after")
	cpuprofile := flag.String("cpuprofile", "", "write the process's CPU profile of the whole run here")
	flag.Parse()
	var profile *os.File
	if *cpuprofile != "" {
		var err error
		if profile, err = os.Create(*cpuprofile); err == nil {
			err = pprof.StartCPUProfile(profile)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(2)
		}
	}
	vs, err := choose(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(2)
	}
	code := exitCode(run(os.Stdout, os.Stderr, c, vs, cc, *plot, *csv))
	if profile != nil {
		pprof.StopCPUProfile()
		profile.Close()
	}
	os.Exit(code)
}

// exitCode is 1 for an error, 3 if a target failed, else 0.
func exitCode(failed int, err error) int {
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "overload:", err)
		return 1
	case failed > 0:
		return 3
	}
	return 0
}

// run runs every variant, then the client side, and reports; it returns
// the number of targets failed.
func run(out, progress io.Writer, c config, vs []variant, cc clientConfig, plot, csv string) (int, error) {
	command := strings.TrimSpace("go run ./cmd/overload " + strings.Join(os.Args[1:], " "))
	loadBefore := loadAverage()
	var runs []variantRun
	var sums []summary
	for _, v := range vs {
		fmt.Fprintf(progress, "%s: %s of load\n", v.name, c.duration)
		r, err := runVariant(c, v)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", v.name, err)
		}
		runs = append(runs, r)
		sums = append(sums, summarize(c, r))
	}
	var cr clientRun
	if cc.failFor > 0 {
		fmt.Fprintf(progress, "client side: a partner failing for %s\n", cc.failFor)
		var err error
		if cr, err = runClient(cc); err != nil {
			return 0, fmt.Errorf("client side: %w", err)
		}
	}
	fmt.Fprintf(out, "`%s`, %s, %d CPUs, load average before %s, after %s.\n", command, cpuModel(), runtime.NumCPU(), loadBefore, loadAverage())
	fmt.Fprintf(out, "Server: %d workers × %s (%.0f/s), %d after the drop at %s (%.0f/s), queue %d; load %.0f/s (%.1f× the first capacity), tenants %v, %.1f%% critical, client timeout %s.\n\n",
		c.workers, c.service, c.capacityBefore(), c.workersAfter, c.drop(), c.capacityAfter(), c.queue, c.load*c.capacityBefore(), c.load, c.weights, float64(c.critical)/10, c.timeout)
	table(out, c, sums)
	fmt.Fprintln(out)
	if cc.failFor > 0 {
		clientTable(out, cc, cr)
		fmt.Fprintln(out)
	}
	failed := 0
	for _, s := range sums {
		failed += printChecks(out, s.name, targets(c, s))
	}
	if cc.failFor > 0 {
		failed += printChecks(out, "client", clientTargets(cc, cr))
	}
	if plot != "" && len(runs) > 0 {
		if err := os.MkdirAll(filepath.Dir(plot), 0o755); err != nil {
			return failed, err
		}
		f, err := os.Create(plot)
		if err != nil {
			return failed, err
		}
		title := fmt.Sprintf("overload: %d→%d workers × %s at %s, load %.1f× (%s)", c.workers, c.workersAfter, c.service, c.drop(), c.load, time.Now().UTC().Format("2006-01-02"))
		err = writeSVG(f, title, c.duration.Seconds(), panels(c, runs))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return failed, err
		}
		fmt.Fprintf(out, "\nplot: %s\n", plot)
	}
	if csv != "" && len(runs) > 0 {
		f, err := os.Create(csv)
		if err != nil {
			return failed, err
		}
		err = writeCSV(f, c, runs)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return failed, err
		}
	}
	return failed, nil
}

// loadAverage is the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the model name of /proc/cpuinfo, or GOARCH.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for l := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(l, "model name"); ok {
				return strings.TrimSpace(strings.TrimLeft(name, " \t:"))
			}
		}
	}
	return runtime.GOARCH
}
