package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/keylimit/keylimit/benchmarks"
)

// target is the keylimit type the targets are set for.
const target = "keylimit-bucket"

// report is everything BENCHMARKS.md publishes.
type report struct {
	speeds     []*speed
	contention []contention
	memory     map[string]memoryFigures
	keys       int
	machine    machine
	commands   string
	conditions string
	profiles   []profile
	notes      string
}

type profile struct{ name, top string }

func readProfiles(dir string) ([]profile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	var out []profile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, profile{strings.TrimSuffix(filepath.Base(p), ".txt"), string(b)})
	}
	return out, nil
}

// kinds maps each contender's name to its kind.
func kinds() map[string]benchmarks.Kind {
	m := make(map[string]benchmarks.Kind)
	for _, c := range benchmarks.Contenders() {
		m[c.Name] = c.Kind
	}
	return m
}

func ofKind(names []string, k benchmarks.Kind) []string {
	all := kinds()
	var out []string
	for _, n := range names {
		if all[n] == k {
			out = append(out, n)
		}
	}
	return out
}

func (r *report) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Benchmarks\n\n")
	p("keylimit beside the Go rate limiters people use today, in one `go test -bench` run, on\n")
	p("distinct pre-built 16-byte keys visited in a shuffled order, with the *floor* (a monotonic\n")
	p("clock read, an `xsync.MapOf` lookup and one CAS: the least a keyed limiter can do) measured\n")
	p("beside them. Read the ratios, not the nanoseconds: the machine below is small, virtual and\n")
	p("shared, and every ratio is taken between rows of the same round.\n\n")
	p("This file is generated: `bash benchmarks/run.sh` rewrites all of it (the notes at the end\n")
	p("come from `benchmarks/NOTES.md`). The code is in [`benchmarks/`](benchmarks/), its own module.\n\n")
	r.writeMachine(p)
	p("## Contenders\n\n")
	p("| name | what |\n|---|---|\n")
	for _, c := range benchmarks.Contenders() {
		p("| `%s` | %s |\n", c.Name, c.Doc)
	}
	p("\nLimits: **loose** is 31 events per 250 ns per key, about 10⁸ a second, above what a key is\n")
	p("asked here, so nearly every call is admitted and writes its key's state (it is near the\n")
	p("fastest rate a SlidingCounter can count, and a SlidingWindow keeps 8 bytes per event of the\n")
	p("quota for each key, so a larger burst would cost gigabytes at 1M keys); **tight** is 1 per\n")
	p("hour: each key's one event is spent before the timer starts, so every call measured is refused.\n")
	p("Every contender uses its library's defaults otherwise (keylimit's evictor included).\n\n")
	for _, s := range r.speeds {
		r.writeSpeed(p, s)
	}
	r.writeContention(p)
	r.writeMemory(p)
	r.writeTargets(p)
	if len(r.profiles) > 0 {
		p("## Profiles\n\n")
		p("`go tool pprof -top -focus=runAllow` of the timed loop only (setup left out), for the\n")
		p("rows where the targets are hardest. Flat time is where the CPU was; cumulative includes callees.\n\n")
		for _, pr := range r.profiles {
			p("### %s\n\n```\n%s```\n\n", pr.name, pr.top)
		}
	}
	if r.notes != "" {
		p("%s", r.notes)
	}
}

func (r *report) writeMachine(p func(string, ...any)) {
	m := r.machine
	p("## Machine and commands\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %s cores (`nproc`) |\n", m.cpu, m.cores)
	p("| memory | %s |\n", m.memory)
	p("| clock source | %s |\n", m.clock)
	p("| kernel | %s |\n", m.kernel)
	p("| Go | %s |\n", m.goVersion)
	p("| keylimit | commit %s |\n", m.commit)
	p("| generated | %s |\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	if r.commands != "" {
		p("Commands, run from `benchmarks/` by `run.sh`:\n\n```\n%s```\n\n", r.commands)
	}
	if r.conditions != "" {
		p("The machine is shared. How busy it was (all CPUs, from `/proc/stat` over 2 s) before each\n")
		p("round, which waits for it to be quiet up to a limit:\n\n```\n%s```\n\n", r.conditions)
	}
}

func (r *report) writeSpeed(p func(string, ...any), s *speed) {
	p("## Speed: ns/op, GOMAXPROCS=%d\n\n", s.procs)
	p("Median of %d rounds; after each figure, the largest distance of a round from the median.\n", s.rounds)
	p("*serial* is one goroutine; *parallel* is `b.RunParallel` with GOMAXPROCS goroutines.\n\n")
	head := "| contender |"
	rule := "|---|"
	for _, row := range s.rows {
		head += " " + row + " |"
		rule += "---:|"
	}
	for _, limit := range s.limits {
		p("### %s\n\n%s\n%s\n", limit, head, rule)
		for _, c := range s.contenders {
			line := "| `" + c + "` |"
			for _, row := range s.rows {
				xs := s.values(cellKey{limit, row, c}, nsPerOp)
				if len(xs) == 0 {
					line += " |"
					continue
				}
				m := s.median(limit, row, c)
				line += fmt.Sprintf(" %s ±%.0f%% |", ns(m), 100*spread(xs, m))
			}
			p("%s\n", line)
		}
		p("\n")
	}

	peers := ofKind(s.contenders, benchmarks.Peer)
	floor := floorOf(s)
	p("### Ratios, row by row\n\n")
	p("For each keylimit type: `÷ floor` is its time over the floor's (1.00 is the floor); `best peer ÷`\n")
	p("is the fastest peer's time over its (above 1: keylimit is faster); `ceiling` is the fastest\n")
	p("peer's time over the floor's, the most a limiter built on the floor's three steps could lead\n")
	p("the peers by on that row. Each ratio is the median over rounds of the ratio within a round.\n\n")
	for _, kl := range ofKind(s.contenders, benchmarks.Keylimit) {
		p("#### `%s`\n\n", kl)
		p("| limit | row | floor | %s | ÷ floor | fastest peer | best peer ÷ | ceiling |\n", kl)
		p("|---|---|---:|---:|---:|---|---:|---:|\n")
		for _, limit := range s.limits {
			for _, row := range s.rows {
				best := s.fastest(limit, row, peers)
				p("| %s | %s | %s | %s | %s | `%s` %s | %s | %s |\n", limit, row,
					ns(s.median(limit, row, floor)), ns(s.median(limit, row, kl)),
					x(s.ratio(s.of(limit, row, kl), s.of(limit, row, floor))),
					best, ns(s.median(limit, row, best)),
					x(s.ratio(s.bestOf(limit, row, peers), s.of(limit, row, kl))),
					x(s.ratio(s.bestOf(limit, row, peers), s.of(limit, row, floor))))
			}
		}
		p("\n")
	}

	p("### Allocations per call (median)\n\n")
	head, rule = "| contender |", "|---|"
	for _, limit := range s.limits {
		for _, row := range s.rows {
			head += " " + limit + " " + row + " |"
			rule += "---:|"
		}
	}
	p("%s\n%s\n", head, rule)
	for _, c := range s.contenders {
		line := "| `" + c + "` |"
		for _, limit := range s.limits {
			for _, row := range s.rows {
				line += fmt.Sprintf(" %g |", median(s.values(cellKey{limit, row, c}, allocs)))
			}
		}
		p("%s\n", line)
	}
	p("\n")
	r.writeAdmitted(p, s)
}

// writeAdmitted checks that the limits did what their names say: loose
// admitted nearly every call, tight refused nearly every one.
func (r *report) writeAdmitted(p func(string, ...any), s *speed) {
	const nearly = 0.99
	var odd []string
	for _, limit := range s.limits {
		for _, row := range s.rows {
			for _, c := range s.contenders {
				if kinds()[c] == benchmarks.Floor {
					continue
				}
				share := median(s.values(cellKey{limit, row, c}, admitted))
				if (limit == "loose" && share < nearly) || (limit == "tight" && share > 1-nearly) {
					odd = append(odd, fmt.Sprintf("`%s` %s %s admitted %.1f%%", c, limit, row, 100*share))
				}
			}
		}
	}
	p("### Did the limits do what their names say?\n\n")
	p("Each row counts the calls its contender admitted (the `admitted/op` metric).\n")
	if len(odd) == 0 {
		p("Every limiter admitted at least %.0f%% of its calls on every loose row and refused at least\n", 100*nearly)
		p("%.0f%% on every tight row.\n\n", 100*nearly)
		return
	}
	p("These rows admitted a share their limit's name does not promise (median over rounds):\n\n")
	for _, o := range odd {
		p("- %s\n", o)
	}
	p("\n")
}

// floorOf returns the name of the floor, or "" if the run had none.
func floorOf(s *speed) string {
	if f := ofKind(s.contenders, benchmarks.Floor); len(f) > 0 {
		return f[0]
	}
	return ""
}

// x writes a ratio.
func x(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func ns(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func (r *report) writeContention(p func(string, ...any)) {
	if len(r.contention) == 0 {
		return
	}
	p("## Exactness: one hot key, many goroutines\n\n")
	p("Each round builds a new limiter, then %d goroutines, released at once, call `Allow` on one\n", r.contention[0].goroutines)
	p("key it has never seen. The limit's period is an hour, so the clock barely moves. The *bound*\n")
	p("is the most the contender's algorithm allows in the time the round took: for a token bucket,\n")
	p("the burst plus what refills meanwhile (burst × elapsed / period), which also bounds a window\n")
	p("that opens with the key (ulule, sethvargo) and a sliding window; for keylimit's FixedWindow and\n")
	p("SlidingCounter, whose windows are aligned to the Unix epoch, the burst per window the round\n")
	p("touched. *Under-admits* means fewer than the burst were admitted although many more asked. An\n")
	p("error is a refusal the library could not decide (throttled gives up after 10 failed\n")
	p("compare-and-swaps). `TestHotKeyContention` asserts that every keylimit type admits between the\n")
	p("burst and the bound, with no error, in every round, under `-race` too; the peers' counts are\n")
	p("what they did here.\n\n")
	for _, ct := range r.contention {
		p("### %s: %d goroutines × %d calls, rounds: %d\n\n", ct.title, ct.goroutines, ct.attempts, len(ct.rounds[target]))
		p("| contender | admitted | bound | verdict |\n|---|---:|---:|---|\n")
		for _, c := range benchmarks.Contenders() {
			if err, ok := ct.refused[c.Name]; ok {
				p("| `%s` | – | – | cannot be built for this quota: %s |\n", c.Name, err)
				continue
			}
			as, ok := ct.rounds[c.Name]
			if !ok || len(as) == 0 {
				continue
			}
			s := summarize(as, ct.quota.Burst)
			p("| `%s` | %s | %s | %s |\n", c.Name, span(s.minAdmitted, s.maxAdmitted), span(s.minBound, s.maxBound), s.verdict())
		}
		p("\n")
	}
}

// dur writes d without its zero minutes and seconds: 1h, not 1h0m0s.
func dur(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimSuffix(d.String(), "0s"), "0m")
}

func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

func (r *report) writeMemory(p func(string, ...any)) {
	if len(r.memory) == 0 {
		return
	}
	held, idle := benchmarks.HeldQuota, benchmarks.IdleQuota
	p("## Memory: heap bytes per key\n\n")
	p("Each figure is measured in a process of its own (`go run ./cmd/benchreport -memory NAME\n")
	p("-keys %d [-idle]`): the live heap after two `runtime.GC()`, less the live heap before the\n", r.keys)
	p("limiter was built, over %d keys, each used once. The keys are made inside the measurement\n", r.keys)
	p("and dropped, so a key's 16 bytes count only if the limiter keeps them.\n\n")
	p("*held*: the limit is %d per %s, so no key may be forgotten while it is measured.\n", held.Burst, dur(held.Period))
	p("*once idle*: the limit is %d per %s, so each key is idle %s after its use; limiters that can\n", idle.Burst, dur(idle.Period), dur(idle.Period))
	p("evict are asked to sweep every %s, and measured once the heap has stopped shrinking.\n\n", dur(idle.Sweep))
	p("| contender | bytes/key, held | bytes/key, once idle | how idle keys leave |\n|---|---:|---:|---|\n")
	for _, c := range benchmarks.Contenders() {
		f, ok := r.memory[c.Name]
		if !ok {
			continue
		}
		once, how := "cannot evict", c.Evicts
		if how == "" {
			how = "never: its memory only grows"
		}
		if f.idle != nil {
			once = fmt.Sprintf("%.1f (after %.1f s)", f.idle.PerKey, f.idle.Waited.Seconds())
		}
		p("| `%s` | %.1f | %s | %s |\n", c.Name, f.held.PerKey, once, how)
	}
	p("\n")
}

// writeTargets checks the targets for the target type against the
// figures above.
func (r *report) writeTargets(p func(string, ...any)) {
	p("## The targets, checked\n\n")
	p("For `%s`, against the figures above (each ratio a median of within-round ratios).\n\n", target)
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	for _, s := range r.speeds {
		peers := ofKind(s.contenders, benchmarks.Peer)
		floor := floorOf(s)
		if !slices.Contains(s.contenders, target) || len(peers) == 0 || floor == "" {
			continue
		}
		var slower, overFloor, notFast []string
		worstPeer, worstFloor, maxAllocs := math.Inf(1), 0.0, 0.0
		for _, limit := range s.limits {
			for _, row := range s.rows {
				toPeer := s.ratio(s.bestOf(limit, row, peers), s.of(limit, row, target))
				toFloor := s.ratio(s.of(limit, row, target), s.of(limit, row, floor))
				worstPeer, worstFloor = min(worstPeer, toPeer), max(worstFloor, toFloor)
				where := limit + " " + row
				if toPeer <= 1 {
					slower = append(slower, fmt.Sprintf("%s (best peer ÷ keylimit %.2f)", where, toPeer))
				}
				if toFloor > 1.3 {
					overFloor = append(overFloor, fmt.Sprintf("%s (%.2f× the floor)", where, toFloor))
				}
				if (row == "keys=1/serial" || row == "keys=1M/parallel") && toPeer < 1.5 {
					notFast = append(notFast, fmt.Sprintf("%s (%.2f×)", where, toPeer))
				}
				maxAllocs = max(maxAllocs, median(s.values(cellKey{limit, row, target}, allocs)))
			}
		}
		p("GOMAXPROCS=%d:\n\n", s.procs)
		p("- Faster than every peer on every row: %s (the smallest lead: %.2f×)%s\n", mark(len(slower) == 0), worstPeer, list(slower))
		p("- At most 1.3× the floor on every row: %s (the largest: %.2f×)%s\n", mark(len(overFloor) == 0), worstFloor, list(overFloor))
		p("- At least 1.5× faster than the best peer on keys=1 serial and keys=1M parallel: %s%s\n", mark(len(notFast) == 0), list(notFast))
		p("- Zero allocations: %s (the most on any row: %g)\n", mark(maxAllocs == 0), maxAllocs)
	}
	if m, ok := r.memory[target]; ok {
		var lighter []string
		for _, c := range benchmarks.Contenders() {
			pm, ok := r.memory[c.Name]
			if c.Kind != benchmarks.Peer || c.Evicts == "" || !ok {
				continue
			}
			if m.held.PerKey >= pm.held.PerKey {
				lighter = append(lighter, fmt.Sprintf("`%s` keeps %.1f", c.Name, pm.held.PerKey))
			}
		}
		p("- Fewer bytes per key (held) than every peer that can evict: %s (%.1f bytes/key)%s\n",
			mark(len(lighter) == 0), m.held.PerKey, list(lighter))
	}
	p("\n")
}

// list renders misses after a target's line, or nothing.
func list(xs []string) string {
	if len(xs) == 0 {
		return "."
	}
	return ": " + strings.Join(xs, "; ") + "."
}
