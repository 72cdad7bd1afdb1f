// Command testrun runs `go test -json` in each module it is given and prints
// what a contributor waiting for it wants to see: each package as it ends,
// each test that took longer than -slow, a line on what is running (and
// what it last logged) whenever nothing was printed for -quiet, and the
// whole output of every test that fails. .ci/test runs it:
//
//	go run ./.ci/testrun [-j 2] benchmarks . redislimit -- -race -count=1
//
// The arguments after -- go to go test, which runs ./... in each module.
// It exits 1 when a test or a build failed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	jobs := flag.Int("j", 1, "modules tested at once")
	slow := flag.Duration("slow", 5*time.Second, "name each test that takes this long")
	quiet := flag.Duration("quiet", 10*time.Second, "say what is running after this long without a line")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./.ci/testrun [flags] module-dir... [-- go-test-flags]")
		flag.PrintDefaults()
	}
	flag.Parse()
	modules, testFlags := flag.Args(), []string(nil)
	if i := slices.Index(modules, "--"); i >= 0 {
		modules, testFlags = modules[:i], modules[i+1:]
	}
	if len(modules) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	r := &run{out: os.Stdout, start: time.Now(), slow: *slow, last: time.Now()}
	fmt.Fprintf(r.out, "go test -json %s ./... in %s, %d at a time\n", strings.Join(testFlags, " "), strings.Join(modules, ", "), *jobs)
	stop := make(chan struct{})
	go r.heartbeat(*quiet, stop)
	sem := make(chan struct{}, max(*jobs, 1))
	var wg sync.WaitGroup
	for _, dir := range modules {
		m := r.module(dir)
		sem <- struct{}{} // here, not in the goroutine: modules start in order
		wg.Go(func() {
			defer func() { <-sem }()
			r.test(m, testFlags)
		})
		// The next module starts once this one's first test binary runs:
		// two go commands building at once on a cold cache would each
		// compile the standard library with -race, as neither has it yet.
		<-m.built
	}
	wg.Wait()
	close(stop)
	took := time.Since(r.start).Round(time.Second)
	if len(r.failed) > 0 {
		fmt.Fprintf(r.out, "FAIL after %v: %s\n", took, strings.Join(r.failed, ", "))
		os.Exit(1)
	}
	fmt.Fprintf(r.out, "all tests passed in %v\n", took)
}

// run is the state of one testrun; mu protects everything below it.
type run struct {
	out   io.Writer
	start time.Time
	slow  time.Duration

	mu     sync.Mutex
	last   time.Time // when a line was last printed
	order  []*module
	failed []string // packages and tests that failed, for the last line
}

// module is one module's go test, and what it is doing now.
type module struct {
	dir     string
	started bool            // its go test is running
	done    bool            // its go test has ended
	built   chan struct{}   // closed when its first test binary starts, or it ends
	first   sync.Once       // closes built
	running map[string]*pkg // packages whose tests are running, by import path
	// buildFailed holds the import paths of packages whose tests did not build.
	buildFailed []string
}

// pkg is one package's test binary while it runs.
type pkg struct {
	name    string              // import path, shortened for printing
	tests   map[string]*test    // top-level tests running, by name
	output  map[string][]string // each top-level test's output, kept until it ends
	own     []string            // output that belongs to no test
	skipped int
	failed  int  // tests that failed
	ran     bool // a test started
}

// test is a top-level test while it runs.
type test struct {
	since time.Time
	said  string // the last line it or a subtest logged, after the subtest's name
	by    string // the test or subtest that said it
}

// event is a line of go test -json (go doc cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

func (r *run) module(dir string) *module {
	m := &module{dir: dir, running: map[string]*pkg{}, built: make(chan struct{})}
	r.mu.Lock() // the heartbeat reads order
	r.order = append(r.order, m)
	r.mu.Unlock()
	return m
}

// printf prints a line stamped with the time since the run began.
// The caller holds r.mu.
func (r *run) printf(format string, args ...any) {
	r.last = time.Now()
	fmt.Fprintf(r.out, "[%3.0fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// test runs go test in module m and reports its events as they come.
func (r *run) test(m *module, flags []string) {
	defer m.first.Do(func() { close(m.built) })
	r.mu.Lock()
	m.started = true
	r.printf("start module %s: building its tests", moduleName(m.dir))
	r.mu.Unlock()

	args := append([]string{"test", "-json"}, flags...)
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = m.dir
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		r.mu.Lock()
		r.printf("FAIL  %s: %v", m.dir, err)
		r.failed = append(r.failed, m.dir)
		r.mu.Unlock()
		return
	}
	sawFail := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || (e.Action == "" && e.Package == "") {
			r.mu.Lock()
			r.printf("%s", sc.Text())
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		sawFail = r.event(m, e) || sawFail
		r.mu.Unlock()
	}
	err = cmd.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	m.done = true
	if err != nil && !sawFail {
		// go test failed without a failing package: a pattern matched
		// nothing, go.mod is broken, or the go command was killed.
		r.printf("FAIL  %s: go test: %v", moduleName(m.dir), err)
		r.failed = append(r.failed, moduleName(m.dir))
	}
}

// event handles one event of module m and reports whether it was a failure.
// The caller holds r.mu.
func (r *run) event(m *module, e event) bool {
	switch e.Action {
	case "build-output":
		r.printf("      %s", strings.TrimRight(e.Output, "\n"))
		return false
	case "build-fail":
		// The package's own fail event follows, and names it.
		path, _, _ := strings.Cut(e.ImportPath, " ")
		m.buildFailed = append(m.buildFailed, path)
		return true
	}
	p := m.running[e.Package]
	if p == nil {
		p = &pkg{name: shortName(e.Package), tests: map[string]*test{}, output: map[string][]string{}}
		m.running[e.Package] = p
	}
	top, subName, sub := strings.Cut(e.Test, "/")
	switch {
	case e.Test == "" && e.Action == "output":
		p.own = append(p.own, e.Output)
	case e.Test == "" && e.Action == "pass":
		delete(m.running, e.Package)
		if !p.ran {
			return false // no test files, or none matched
		}
		note := ""
		switch {
		case p.skipped == 1:
			note = " (1 test skipped)"
		case p.skipped > 1:
			note = fmt.Sprintf(" (%d tests skipped)", p.skipped)
		}
		r.printf("ok    %s %.1fs%s", p.name, e.Elapsed, note)
	case e.Test == "" && e.Action == "skip":
		delete(m.running, e.Package)
	case e.Test == "" && e.Action == "fail":
		delete(m.running, e.Package)
		for name, out := range p.output { // tests cut short: a panic, a timeout
			r.printf("FAIL  %s %s (did not finish)", p.name, name)
			r.dump(out)
			r.failed = append(r.failed, p.name+" "+name)
			p.failed++
		}
		r.printf("FAIL  %s %.1fs", p.name, e.Elapsed)
		r.dump(slices.DeleteFunc(p.own, isTrailer))
		switch {
		case slices.Contains(m.buildFailed, e.Package):
			r.failed = append(r.failed, p.name+" (build failed)")
		case p.failed == 0:
			r.failed = append(r.failed, p.name)
		}
		return true
	case e.Action == "run" && !sub:
		m.first.Do(func() { close(m.built) })
		p.ran = true
		p.tests[top] = &test{since: time.Now()}
	case e.Action == "output":
		p.output[top] = append(p.output[top], e.Output)
		if t := p.tests[top]; t != nil && isLog(e.Output) {
			t.said, t.by = strings.TrimSpace(e.Output), e.Test
			if sub {
				t.said = subName + ": " + t.said
			}
		}
	case e.Action == "skip" && sub:
		// What a skipped subtest said is why it skipped, not what runs.
		if t := p.tests[top]; t != nil && t.by == e.Test {
			t.said, t.by = "", ""
		}
	case e.Action == "skip" && !sub:
		p.skipped++
		fallthrough
	case e.Action == "pass" && !sub:
		delete(p.tests, top)
		delete(p.output, top)
		if d := time.Duration(e.Elapsed * float64(time.Second)); d >= r.slow {
			r.printf("slow  %s %s %.1fs", p.name, top, e.Elapsed)
		}
	case e.Action == "fail" && !sub:
		r.printf("FAIL  %s %s %.1fs", p.name, top, e.Elapsed)
		r.dump(p.output[top])
		delete(p.tests, top)
		delete(p.output, top)
		r.failed = append(r.failed, p.name+" "+top)
		p.failed++
	}
	return false
}

// dump prints a failure's output as go test would, indented.
func (r *run) dump(lines []string) {
	for _, l := range lines {
		fmt.Fprintf(r.out, "        %s", l)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(r.out)
		}
	}
}

// heartbeat prints what is running whenever nothing was printed for quiet.
func (r *run) heartbeat(quiet time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		if time.Since(r.last) >= quiet {
			r.printf("...   %s", r.status())
		}
		r.mu.Unlock()
	}
}

// status says what each module is doing: building, or which test has run
// longest in each of its packages and what it last logged. The caller
// holds r.mu.
func (r *run) status() string {
	var parts []string
	for _, m := range r.order {
		if !m.started || m.done {
			continue
		}
		var busy []string
		for _, p := range m.running {
			var name string
			for n, t := range p.tests {
				if name == "" || t.since.Before(p.tests[name].since) {
					name = n
				}
			}
			if t := p.tests[name]; t != nil {
				b := fmt.Sprintf("%s %s for %.0fs", p.name, name, time.Since(t.since).Seconds())
				if t.said != "" {
					b += "; it last logged " + t.said
				}
				busy = append(busy, b)
			}
		}
		if len(busy) == 0 {
			busy = append(busy, moduleName(m.dir)+": building or between packages")
		}
		slices.Sort(busy)
		parts = append(parts, busy...)
	}
	return "running " + strings.Join(parts, "; ")
}

// isLog reports whether a line of a test's output is something the test
// said, rather than go test's own framing (=== RUN, --- PASS).
func isLog(line string) bool {
	l := strings.TrimSpace(line)
	for _, frame := range []string{"=== ", "--- PASS", "--- SKIP", "PASS", "ok "} {
		if strings.HasPrefix(l, frame) {
			return false
		}
	}
	return l != ""
}

// isTrailer reports whether a line of a package's own output is go test's
// summary of it (FAIL, ok, PASS), which testrun prints its own way.
func isTrailer(line string) bool {
	l := strings.TrimSpace(line)
	return l == "FAIL" || l == "PASS" || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "ok \t")
}

// shortName drops the host and owner from an import path:
// github.com/keylimit/keylimit/httplimit is keylimit/httplimit.
func shortName(importPath string) string {
	if parts := strings.SplitN(importPath, "/", 3); len(parts) == 3 && strings.Contains(parts[0], ".") {
		return parts[2]
	}
	return importPath
}

// moduleName names a module by its directory: the root is ".".
func moduleName(dir string) string {
	return path.Clean(dir)
}
