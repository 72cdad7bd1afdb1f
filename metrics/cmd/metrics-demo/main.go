// Command metrics-demo shows what the metrics module exports: a server on
// 127.0.0.1 limits its handler with httplimit and serves /metrics beside
// it; after a burst of requests, the demo scrapes /metrics and prints the
// lines that matter: the decisions by policy and outcome, the decision
// latency histogram's count, and the keys each limiter tracks.
//
//	cd metrics && go run ./cmd/metrics-demo
//
// keylimit-demo, the tour of the repository's root, runs it as one of its
// scenes.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/keylimit/keylimit/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	if err := run(os.Stdout, clock.New()); err != nil {
		fmt.Fprintln(os.Stderr, "metrics-demo:", err)
		os.Exit(1)
	}
}

// shown are the series the demo prints, by name; every other keylimit
// series is counted and left out.
var shown = []string{
	"keylimit_http_decisions_total{",
	"keylimit_http_decision_seconds_count{",
	"keylimit_keys{",
}

// run serves a limited handler and /metrics on a free port of 127.0.0.1,
// with the limiters on clk, sends it requests, and prints what /metrics
// says of them. It waits only with clk.Timer, so that a test can make time
// pass by itself on a mock.
func run(w io.Writer, clk clock.Clock) error {
	second, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(5), keylimit.WithClock(clk))
	if err != nil {
		return err
	}
	defer second.Close()
	minute, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(8), keylimit.WithClock(clk))
	if err != nil {
		return err
	}
	defer minute.Close()

	reg := prometheus.NewRegistry()
	api := metrics.NewHTTP("api")
	reg.MustRegister(api, metrics.NewStats("second", second), metrics.NewStats("minute", minute))
	limit, err := httplimit.New(httplimit.Config{
		Key:        httplimit.Header("X-API-Key"),
		Policies:   []quota.Policy{{Name: "second", Limiter: second}, {Name: "minute", Limiter: minute}},
		OnDecision: api.OnDecision,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String()

	fmt.Fprintln(w, `A server on 127.0.0.1 limits / per API key with two policies, "second" (5 at once,`)
	fmt.Fprintln(w, `5 a second) and "minute" (8 a minute), and serves /metrics beside it, unlimited:`)
	fmt.Fprintln(w, "metrics.NewHTTP counts the middleware's decisions, metrics.NewStats reads each limiter.")
	fmt.Fprintln(w)
	var passed, refused int
	// send sends n requests as key and says how many passed, and which
	// policy refused the others, as the 429s' bodies name it.
	send := func(key string, n int) (string, error) {
		ok := 0
		var by []string // the refusing policies, in the order first met
		refusedBy := map[string]int{}
		for range n {
			req, err := http.NewRequest(http.MethodGet, url+"/", nil)
			if err != nil {
				return "", err
			}
			req.Header.Set("X-API-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				return "", err
			}
			var body struct{ Policy string }
			if resp.StatusCode == http.StatusTooManyRequests {
				err = json.NewDecoder(resp.Body).Decode(&body)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				return "", fmt.Errorf("GET / as %s: the 429's body: %w", key, err)
			case resp.StatusCode == http.StatusOK:
				ok++
			case resp.StatusCode == http.StatusTooManyRequests:
				if refusedBy[body.Policy] == 0 {
					by = append(by, body.Policy)
				}
				refusedBy[body.Policy]++
			default:
				return "", fmt.Errorf("GET / as %s: %s", key, resp.Status)
			}
		}
		passed, refused = passed+ok, refused+n-ok
		if ok == n {
			return fmt.Sprintf("%d passed", ok), nil
		}
		var counts []string
		for _, p := range by {
			counts = append(counts, fmt.Sprintf("%d by %q", refusedBy[p], p))
		}
		return fmt.Sprintf("%d passed, refused %s (429)", ok, strings.Join(counts, ", ")), nil
	}
	for _, step := range []struct {
		say, key string
		n        int
		wait     time.Duration // before the step
	}{
		{"alice sends 8 rapid requests", "alice", 8, 0},
		{"bob sends 3", "bob", 3, 0},
		{"1s later, alice sends 8 more", "alice", 8, time.Second},
	} {
		if step.wait > 0 {
			sleep(clk, step.wait)
		}
		got, err := send(step.key, step.n)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %s: %s\n", step.say, got)
	}

	lines, err := scrape(client, url+"/metrics")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nGET /metrics, the lines that matter:")
	var allowed, denied, decided, keys, more int
	for _, line := range lines {
		name, value, err := sample(line)
		if err != nil {
			return err
		}
		switch {
		case !isShown(name):
			more++
			continue
		case strings.HasPrefix(name, "keylimit_http_decisions_total{") && strings.Contains(name, `outcome="allowed"`):
			allowed += value
		case strings.HasPrefix(name, "keylimit_http_decisions_total{") && strings.Contains(name, `outcome="refused"`):
			denied += value
		case strings.HasPrefix(name, "keylimit_http_decision_seconds_count{"):
			decided += value
		case strings.HasPrefix(name, "keylimit_keys{"):
			keys = max(keys, value)
		}
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprintf(w, "  (and %d more keylimit lines: the histogram's buckets and sum, evicted and untracked keys)\n", more)
	verdict := "what the clients saw"
	if allowed != passed || denied != refused || decided != passed+refused {
		verdict = fmt.Sprintf("not what the clients saw: %d passed, %d refused", passed, refused)
	}
	fmt.Fprintf(w, "\n%d allowed and %d refused, %d decisions timed in the histogram: %s.\n", allowed, denied, decided, verdict)
	fmt.Fprintln(w, "Each decision counts under its binding policy: for a refusal, the one that refused; for")
	fmt.Fprintf(w, "a pass, the one closest to refusing. %s in each limiter, alice and bob; a key is\n", plural(keys, "key"))
	fmt.Fprintln(w, "never a label, since a series per client would grow without bound.")
	return nil
}

// scrape returns the keylimit series of the exposition at url, one sample a
// line, without the HELP and TYPE lines.
func scrape(client *http.Client, url string) ([]string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "keylimit_") {
			lines = append(lines, line)
		}
	}
	return lines, sc.Err()
}

// sample splits a line of the exposition into its name with labels and
// its value, read as a whole number (the bucket and sum lines' values,
// which may not be, read as 0: they are not shown).
func sample(line string) (name string, value int, err error) {
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, fmt.Errorf("GET /metrics: a line without a value: %q", line)
	}
	name = line[:i]
	if !isShown(name) {
		return name, 0, nil
	}
	v, err := strconv.Atoi(line[i+1:])
	if err != nil {
		return "", 0, fmt.Errorf("GET /metrics: %q: %w", line, err)
	}
	return name, v, nil
}

// isShown reports whether the series name (with its labels) is one the
// demo prints.
func isShown(name string) bool {
	for _, s := range shown {
		if strings.HasPrefix(name, s) {
			return true
		}
	}
	return false
}

// sleep waits d on clk, by a Timer: a test's clock makes the time pass
// when it is asked for one.
func sleep(clk clock.Clock, d time.Duration) {
	t := clk.Timer(d)
	defer t.Stop()
	<-t.C
}

// plural counts things: "1 key", "2 keys".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
