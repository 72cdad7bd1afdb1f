package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// halfStats is one half of a variant's run, before or after the drop.
type halfStats struct {
	goodput  float64       // requests answered 200 in time, completed in the half, a second, over the half's nominal capacity
	measured float64       // the same over the half's measured capacity: workers over the time a request's work took
	p50, p99 time.Duration // of the admitted requests sent in the half: answered 200, or never answered in time
	served   []float64     // each tenant's requests answered 200 in time, over those it sent in the half
	lag      time.Duration // the p99 of how late the load generator sent the half's requests
}

// summary is what the table says of one variant.
type summary struct {
	name     string
	unloaded time.Duration
	service  [2]time.Duration // as measured
	halves   [2]halfStats
	recovery time.Duration // from the drop until goodput is within 10% of the new measured capacity for good; -1 if never
	critical float64       // critical requests answered 200 in time, over those sent
}

// recoveryWindow is the span over which goodput is judged to be back, in
// windows that start at multiples of recoveryStep after the drop (see
// recovery).
const (
	recoveryWindow = time.Second
	recoveryStep   = 100 * time.Millisecond
)

// summarize computes a variant's row from its records.
func summarize(c config, run variantRun) summary {
	s := summary{name: run.name, unloaded: run.unloaded, service: run.service, recovery: -1}
	bounds := [3]time.Duration{0, c.drop(), c.duration}
	capacity := [2]float64{c.capacityBefore(), c.capacityAfter()}
	var critical, criticalOK int
	for h := range 2 {
		from, to := bounds[h], bounds[h+1]
		var good int
		var admitted, lags []time.Duration
		sent := make([]int, len(c.weights))
		served := make([]int, len(c.weights))
		for _, r := range run.records {
			if done := r.at + r.latency; r.outcome == ok && done >= from && done < to {
				good++
			}
			if r.at < from || r.at >= to {
				continue
			}
			sent[r.tenant]++
			lags = append(lags, r.lag)
			if r.outcome == ok {
				served[r.tenant]++
			}
			if r.outcome == ok || r.outcome == timedOut {
				admitted = append(admitted, r.latency)
			}
			if r.critical {
				critical++
				if r.outcome == ok {
					criticalOK++
				}
			}
		}
		st := &s.halves[h]
		st.goodput = float64(good) / (to - from).Seconds() / capacity[h]
		st.measured = float64(good) / (to - from).Seconds() / measuredCapacity(c, run, h)
		st.p50, st.p99 = percentile(admitted, 50), percentile(admitted, 99)
		st.lag = percentile(lags, 99)
		st.served = make([]float64, len(sent))
		for t := range sent {
			if sent[t] > 0 {
				st.served[t] = float64(served[t]) / float64(sent[t])
			}
		}
	}
	if critical > 0 {
		s.critical = float64(criticalOK) / float64(critical)
	}
	s.recovery = recovery(c, measuredCapacity(c, run, 1), run.records)
	return s
}

// percentile returns the p-th percentile of d (nearest rank), 0 for none.
// It sorts d.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := (p*len(d) + 99) / 100 // ⌈p·n/100⌉, from 1
	return d[max(rank, 1)-1]
}

// measuredCapacity is the requests a second the server could serve in half
// h of run: its workers over the time a request's work took on average
// there, which a loaded machine makes longer than the nominal service time
// (the nominal capacity if nothing was served).
func measuredCapacity(c config, run variantRun, h int) float64 {
	workers := [2]int{c.workers, c.workersAfter}[h]
	if run.service[h] <= 0 {
		return float64(workers) / c.service.Seconds()
	}
	return float64(workers) / run.service[h].Seconds()
}

// recovery returns how long after the drop goodput is back within 10% of
// capacity (requests a second) for good: the start of the first window of
// recoveryWindow, at a multiple of recoveryStep after the drop, from which
// that window and every later one that ends by the end of the load are
// within 10%; -1 if the last one is not.
func recovery(c config, capacity float64, records []record) time.Duration {
	steps := int((c.duration - c.drop()) / recoveryStep)
	counts := make([]int, steps)
	for _, r := range records {
		if r.outcome != ok {
			continue
		}
		if i := (r.at + r.latency - c.drop()) / recoveryStep; i >= 0 && int(i) < steps {
			counts[i]++
		}
	}
	per := int(recoveryWindow / recoveryStep)
	want := capacity * recoveryWindow.Seconds()
	back := time.Duration(-1)
	for i := steps - per; i >= 0; i-- {
		n := 0
		for _, k := range counts[i : i+per] {
			n += k
		}
		if float64(n) < 0.9*want || float64(n) > 1.1*want {
			break
		}
		back = time.Duration(i) * recoveryStep
	}
	return back
}

// table writes the summaries as a Markdown table, a row per variant and
// half.
func table(w io.Writer, c config, sums []summary) {
	fmt.Fprintf(w, "| variant | half | goodput (%% of nominal capacity) | (%% of measured) | p50 | p99 | p99 / unloaded | within 10%% of measured capacity for good after the drop | served / demand (%s) | critical OK | a request's work took | sent late, p99 |\n",
		strings.Join(tenantLabels(c.weights), ", "))
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	for _, s := range sums {
		for h, st := range s.halves {
			half, rec, crit := "1st", "", ""
			if h == 1 {
				half, rec = "2nd", seconds(s.recovery)
			} else {
				crit = percent(s.critical)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.1f× | %s | %s | %s | %s | %s |\n",
				s.name, half, percent(st.goodput), percent(st.measured), ms(st.p50), ms(st.p99),
				st.p99.Seconds()/s.unloaded.Seconds(), rec, percents(st.served), crit, ms(s.service[h]), ms(st.lag))
		}
	}
}

// tenantLabels names the tenants by weight: "heavy ×10" for the largest,
// then "small 1".
func tenantLabels(weights []int) []string {
	out := make([]string, len(weights))
	for t, w := range weights {
		if heavy(weights) == t {
			out[t] = fmt.Sprintf("t%d ×%d", t, w)
		} else {
			out[t] = fmt.Sprintf("t%d", t)
		}
	}
	return out
}

// heavy is the tenant with the largest weight.
func heavy(weights []int) int {
	return slices.Index(weights, slices.Max(weights))
}

// check is one target, judged.
type check struct {
	what string
	pass bool
}

// targets judges a summary against issue 40's targets.
func targets(c config, s summary) []check {
	var out []check
	for h, st := range s.halves {
		half := [2]string{"1st half", "2nd half"}[h]
		out = append(out,
			check{fmt.Sprintf("goodput %s of the measured capacity ≥ 90%% (%s of nominal; %s)", percent(st.measured), percent(st.goodput), half), st.measured >= 0.9},
			check{fmt.Sprintf("p99 %s ≤ 3× unloaded %s (%s)", ms(st.p99), ms(s.unloaded), half), st.p99 <= 3*s.unloaded},
		)
		hv := heavy(c.weights)
		for t, f := range st.served {
			if t == hv {
				continue
			}
			out = append(out, check{fmt.Sprintf("small tenant t%d served %s of its demand ≥ 90%% while t%d gets %s (%s)",
				t, percent(f), hv, percent(st.served[hv]), half), f >= 0.9 && st.served[hv] < f})
		}
	}
	out = append(out,
		check{fmt.Sprintf("within 10%% of the new measured capacity for good %s ≤ 2 s after the drop", seconds(s.recovery)), s.recovery >= 0 && s.recovery <= 2*time.Second},
		check{fmt.Sprintf("critical requests OK %s ≥ 99%%", percent(s.critical)), s.critical >= 0.99},
	)
	return out
}

// printChecks writes PASS or FAIL and the target, a line each, prefixed.
func printChecks(w io.Writer, prefix string, checks []check) (failed int) {
	for _, k := range checks {
		verdict := "PASS"
		if !k.pass {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s: %s\n", verdict, prefix, k.what)
	}
	return failed
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func percents(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%.0f%%", 100*f)
	}
	return strings.Join(parts, " / ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func seconds(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
