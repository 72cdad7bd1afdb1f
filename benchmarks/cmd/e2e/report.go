package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// wrkResult is what a run of wrk counted.
type wrkResult struct {
	requests  int64
	perSecond float64
}

// parseWrk reads wrk's report. It returns an error if wrk saw a response
// other than 2xx or 3xx (a contender refused: its quota is wrong) or a
// connection fail, or if the report lacks its counts.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var haveRequests, haveRate bool
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk's count of requests %q: %w", f[0], err)
			}
			r.requests, haveRequests = n, true
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("wrk's requests a second %q: %w", f[1], err)
			}
			r.perSecond, haveRate = v, true
		case strings.HasPrefix(strings.TrimSpace(line), "Non-2xx or 3xx responses:"):
			return r, fmt.Errorf("the server refused or failed requests: %s", strings.TrimSpace(line))
		case strings.HasPrefix(strings.TrimSpace(line), "Socket errors:"):
			// A timeout is a request slower than wrk's 2 s, which a busy
			// machine makes; a connection that failed is the server's.
			var connect, read, write, timeout int
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "Socket errors: connect %d, read %d, write %d, timeout %d", &connect, &read, &write, &timeout); err != nil || connect+read+write > 0 {
				return r, fmt.Errorf("wrk: %s", strings.TrimSpace(line))
			}
		}
	}
	if !haveRequests || !haveRate {
		return r, fmt.Errorf("wrk's report has no count of requests:\n%s", out)
	}
	return r, nil
}

// check asks url once, and returns an error unless it answers 200 with
// hello.
func check(url string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, hello) {
		return fmt.Errorf("GET %s: %s %q, want 200 %q", url, resp.Status, body, hello)
	}
	return nil
}

// processCPU is the CPU time the process pid has used, in user and system
// mode, from /proc (Linux). /proc counts it in ticks of USER_HZ, 100 a
// second on every Linux this runs on: a round of 10 s counts it to 0.1%.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command's name, in parentheses, may hold spaces: count the
	// fields after it. utime and stime are fields 14 and 15 of stat(5),
	// the 12th and 13th after the name.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc stat without a command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("/proc stat is short")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// report prints the table of results (by contender, then round) to out.
func (c *config) report(out io.Writer, results [][]round) error {
	version, _ := exec.Command(c.wrk, "-v").CombinedOutput() // wrk -v says its version and exits 1
	first, _, _ := strings.Cut(string(version), "\n")
	first, _, _ = strings.Cut(first, " Copyright")
	pinned := fmt.Sprintf("the server (GOMAXPROCS=1) pinned to CPU %s and wrk to CPU %s with taskset", c.serverCPU, c.loadCPU)
	if c.taskset == "" {
		pinned = "nothing pinned (taskset is not installed): the server (GOMAXPROCS=1) and wrk share the machine's CPUs"
	}
	fmt.Fprintf(out, "`%s`: %d rounds, each contender %v a round after %v of warm-up, in a fresh server process; %s 1 thread, %d connections; %s. Load average %s before, %s after (1, 5, 15 min).\n\n",
		c.command, c.rounds, c.duration, c.warmup, strings.TrimSpace(first)+",", c.connections, pinned, c.loadBefore, loadAverage())
	fmt.Fprintln(out, "| contender | req/s, median | to bare, median | to bare, each round | server CPU per request, median |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for k, rs := range results {
		var perSecond, ratios, cpus []float64
		var each []string
		for r, got := range rs {
			ratio := got.perSecond / results[0][r].perSecond
			perSecond, ratios = append(perSecond, got.perSecond), append(ratios, ratio)
			each = append(each, fmt.Sprintf("%.3f", ratio))
			if got.cpu > 0 {
				cpus = append(cpus, float64(got.cpu)/float64(time.Microsecond))
			}
		}
		cpu := "–"
		if len(cpus) > 0 {
			cpu = fmt.Sprintf("%.2f µs", median(cpus))
		}
		fmt.Fprintf(out, "| `%s` | %s | %.3f | %s | %s |\n", c.contenders[k].name, commas(median(perSecond)), median(ratios), strings.Join(each, ", "), cpu)
	}
	return nil
}

// median is the median of xs, which is not empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// commas formats x rounded to a whole number, with thousands separated by
// commas.
func commas(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
