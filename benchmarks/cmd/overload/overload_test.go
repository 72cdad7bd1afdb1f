package main

import (
	"encoding/xml"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockingPool is a pool whose work waits for the test: entered receives
// as each request's work begins, a send on release ends one.
func blockingPool(workers, queue int) (p *pool, entered, release chan struct{}) {
	p = newPool(workers, 10*time.Millisecond, queue)
	entered, release = make(chan struct{}, 100), make(chan struct{})
	p.work = func(time.Duration) {
		entered <- struct{}{}
		<-release
	}
	return p, entered, release
}

// waitQueued waits until n requests wait in p's queue.
func waitQueued(p *pool, n int) {
	for {
		p.mu.Lock()
		got := len(p.waiting)
		p.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}

// The server serves exactly its workers at once, queues up to its queue,
// refuses beyond, and after a drop to 4 workers starts no request until
// fewer than 4 are served: its capacity is workers/service.
func TestPoolCapacity(t *testing.T) {
	require.Equal(t, 800.0, newPool(8, 10*time.Millisecond, 1).capacity())

	p, entered, release := blockingPool(8, 2)
	done := make(chan bool, 20)
	for range 10 {
		go func() { done <- p.serve() }()
	}
	for range 8 {
		<-entered
	}
	waitQueued(p, 2)
	require.False(t, p.serve(), "the queue is full: refused at once")
	require.Empty(t, entered)

	p.setWorkers(4)
	require.Equal(t, 400.0, p.capacity())
	for range 4 { // 8 served → 4: nobody starts
		release <- struct{}{}
		require.True(t, <-done)
	}
	require.Empty(t, entered)
	waitQueued(p, 2)
	release <- struct{}{} // 3 served: the oldest waiter starts
	require.True(t, <-done)
	<-entered
	waitQueued(p, 1)
	release <- struct{}{}
	require.True(t, <-done)
	<-entered
	waitQueued(p, 0)
	for range 4 {
		release <- struct{}{}
		require.True(t, <-done)
	}
	require.Empty(t, entered)
	p.mu.Lock()
	require.Equal(t, 0, p.busy)
	p.mu.Unlock()
	_, served := p.took()
	require.Equal(t, 10, served)
}

// Evenly spaced arrivals come at exactly the rate, each tenant exactly its
// weight in every 13 in a row, and exactly 10% critical.
func TestScheduleFixed(t *testing.T) {
	s := loadSpec{rate: 1300, duration: time.Second, weights: []int{10, 1, 1, 1}, critical: 100}
	got := s.schedule()
	require.Len(t, got, 1300)
	perTenant := make([]int, 4)
	critical := 0
	for i, a := range got {
		require.Equal(t, time.Duration(i)*time.Second/1300, a.at.Round(time.Nanosecond), "arrival %d", i)
		perTenant[a.tenant]++
		if a.critical {
			critical++
		}
		if i >= 12 {
			window := make([]int, 4)
			for _, b := range got[i-12 : i+1] {
				window[b.tenant]++
			}
			require.Equal(t, []int{10, 1, 1, 1}, window, "arrivals %d-%d", i-12, i)
		}
	}
	require.Equal(t, []int{1000, 100, 100, 100}, perTenant)
	require.Equal(t, 130, critical)
	require.True(t, got[9].critical)
	require.False(t, got[10].critical)

	// 1.5 × 800 a second for 20 s, the run's default.
	require.Len(t, loadSpec{rate: 1200, duration: 20 * time.Second, weights: []int{10, 1, 1, 1}}.schedule(), 24000)
}

// Poisson arrivals keep the order of tenants and critical arrivals and
// come at the rate on average: the seed fixes them, so the count is exact.
func TestSchedulePoisson(t *testing.T) {
	s := loadSpec{rate: 1000, duration: 100 * time.Second, weights: []int{10, 1, 1, 1}, critical: 100, poisson: true, seed: 1}
	got := s.schedule()
	require.Equal(t, got, s.schedule(), "one seed, one schedule")
	require.InDelta(t, 100_000, len(got), 1_000) // 3 standard deviations is 949
	fixed := loadSpec{rate: 1000, duration: time.Hour, weights: s.weights, critical: 100}.schedule()
	for i, a := range got {
		require.Equal(t, fixed[i].tenant, a.tenant)
		require.Equal(t, fixed[i].critical, a.critical)
		if i > 0 {
			require.GreaterOrEqual(t, a.at, got[i-1].at)
		}
	}
}

// testConfig is a run of 4 s, 8 workers of 10 ms then 4 (800/s, then 400/s),
// two tenants of weights 3 and 1.
func testConfig() config {
	return config{duration: 4 * time.Second, workers: 8, workersAfter: 4, service: 10 * time.Millisecond,
		timeout: time.Second, weights: []int{3, 1}}
}

// The table's arithmetic, on records made up so that each figure is known.
func TestSummarize(t *testing.T) {
	c := testConfig()
	var recs []record
	add := func(n int, at, latency time.Duration, tenant int, crit bool, o outcome) {
		for range n {
			recs = append(recs, record{arrival: arrival{at: at, tenant: tenant, critical: crit}, latency: latency, outcome: o})
		}
	}
	// 1st half: 1,600 served (800/s over 2 s: 100%): tenant 0 1,200 of
	// 2,400, tenant 1 400 of 400; 20 critical, 19 served.
	add(1180, 100*time.Millisecond, 10*time.Millisecond, 0, false, ok)
	add(20, 100*time.Millisecond, 40*time.Millisecond, 0, false, ok)
	add(1200, 100*time.Millisecond, 0, 0, false, refused)
	add(381, 200*time.Millisecond, 12*time.Millisecond, 1, false, ok)
	add(19, 200*time.Millisecond, 12*time.Millisecond, 1, true, ok)
	add(1, 300*time.Millisecond, 0, 0, true, shed)
	recs[len(recs)-1].tenant = 1 // its 401st: 400 of 401 served
	// 2nd half (from 2 s): 10 time out, then nothing completes until
	// 2.51 s, then 400/s: 600 served in 2 s (75%); tenant 0 sent 1,000.
	// The work took 10.5 ms: the measured capacity is 381/s. The first 1 s
	// window from a multiple of 0.1 s from which all hold 343 to 419 is
	// the one from 2.4 s, which holds 356 (2.3 s holds 316).
	add(10, 2*time.Second, time.Second, 0, false, timedOut)
	for i := range 590 {
		add(1, 2500*time.Millisecond+time.Duration(i)*2500*time.Microsecond, 10*time.Millisecond, 0, false, ok)
	}
	add(10, 3950*time.Millisecond, 20*time.Millisecond, 0, false, ok)
	add(390, 2600*time.Millisecond, 0, 0, false, refused)
	for i := range 11 { // 11 of the half's 1,000 sent 3 ms late: the 990th is one
		recs[len(recs)-1-i].lag = 3 * time.Millisecond
	}
	s := summarize(c, variantRun{name: "x", unloaded: 10 * time.Millisecond, records: recs, service: [2]time.Duration{10 * time.Millisecond, 10500 * time.Microsecond}})

	require.InDelta(t, 1.0, s.halves[0].goodput, 1e-9)
	require.InDelta(t, 1.0, s.halves[0].measured, 1e-9)
	require.InDelta(t, 0.75*10.5/10, s.halves[1].measured, 1e-9) // 4 workers × 10.5 ms: 381/s
	require.Equal(t, 10*time.Millisecond, s.halves[0].p50)
	require.Equal(t, 40*time.Millisecond, s.halves[0].p99) // ⌈0.99 × 1,600⌉ = 1,584th of 1,600: among the 20 slowest
	require.Equal(t, []float64{0.5, 400.0 / 401}, s.halves[0].served)
	require.InDelta(t, 0.75, s.halves[1].goodput, 1e-9)
	require.Equal(t, 10*time.Millisecond, s.halves[1].p50)
	require.Equal(t, time.Second, s.halves[1].p99) // the timeouts: 10 of 610
	require.Equal(t, []float64{0.6, 0}, s.halves[1].served)
	require.InDelta(t, 19.0/20, s.critical, 1e-9)
	require.Equal(t, 400*time.Millisecond, s.recovery)

	checks := targets(c, s)
	var failed []string
	for _, k := range checks {
		if !k.pass {
			failed = append(failed, k.what)
		}
	}
	require.Equal(t, []string{
		"p99 40.0 ms ≤ 3× unloaded 10.0 ms (1st half)",
		"goodput 78.8% of the measured capacity ≥ 90% (75.0% of nominal; 2nd half)",
		"p99 1000.0 ms ≤ 3× unloaded 10.0 ms (2nd half)",
		"small tenant t1 served 0.0% of its demand ≥ 90% while t0 gets 60.0% (2nd half)",
		"critical requests OK 95.0% ≥ 99%",
	}, failed)

	var b strings.Builder
	table(&b, c, []summary{s})
	require.Contains(t, b.String(), "| x | 1st | 100.0% | 100.0% | 10.0 ms | 40.0 ms | 4.0× |  | 50% / 100% | 95.0% | 10.0 ms | 0.0 ms |\n")
	require.Contains(t, b.String(), "| x | 2nd | 75.0% | 78.8% | 10.0 ms | 1000.0 ms | 100.0× | 0.4 s | 60% / 0% |  | 10.5 ms | 3.0 ms |\n")
}

// Recovery is the start of the first 1 s window after the drop from which
// goodput stays within 10% of the new capacity: not above it, not below it
// again, until the end of the load.
func TestRecovery(t *testing.T) {
	c := testConfig()
	at := func(from, to time.Duration, perSecond int) []record {
		var out []record
		n := int(float64(perSecond) * (to - from).Seconds())
		for i := range n {
			out = append(out, record{arrival: arrival{at: from + time.Duration(i)*(to-from)/time.Duration(n)}, outcome: ok})
		}
		return out
	}
	require.Equal(t, time.Duration(-1), recovery(c, 400, nil))
	require.Equal(t, time.Duration(0), recovery(c, 400, at(2*time.Second, 4*time.Second, 400)))
	// 500/s is 125% of 400: too much, until the window from 2.6 s holds
	// 200 of it and 240 of the 400/s from 3 s: 440, 110%.
	require.Equal(t, 600*time.Millisecond, recovery(c, 400, append(at(2*time.Second, 3*time.Second, 500), at(3*time.Second, 4*time.Second, 400)...)))
	// Back at once, but 0.2 s with nothing from 3.5 s: every window that
	// holds it has 320 or less, the last one too.
	require.Equal(t, time.Duration(-1), recovery(c, 400, append(at(2*time.Second, 3500*time.Millisecond, 400), at(3700*time.Millisecond, 4*time.Second, 400)...)))
	// 400/s from 3.2 s on: the last 1 s window within the load holds 320.
	require.Equal(t, time.Duration(-1), recovery(c, 400, at(3200*time.Millisecond, 4*time.Second, 400)))
}

// The throttling formula, worked by hand: one attempt a second, the
// partner failing at 2 and 3 s.
func TestFormula(t *testing.T) {
	attempts := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}
	// K = 1, counts that do not decay: at 2 s, 2 requests, 2 accepts,
	// p = 0; at 3 s, (3−2)/4; at 4 s (recovered), (4−2)/5 = 0.4; at 5 s, 5
	// requests and 2.6 accepts: 0.4 again, never within 5% of full rate.
	cc := clientConfig{healthy: 2 * time.Second, failFor: 2 * time.Second, k: 1, window: 1 << 62}
	allowed, toFull := formula(cc, attempts)
	require.InDelta(t, 1.75, allowed, 1e-9)
	require.Equal(t, time.Duration(-1), toFull)
	// K = 2, counts decaying as e^(−age/1 s): at 2 s, p = 0; at 3 s,
	// requests e⁻¹+e⁻²+e⁻³ and accepts e⁻²+e⁻³; at 4 s, p = 0.28; at 5 s,
	// requests 0.578 and accepts 0.291: p = 0.
	cc.k, cc.window = 2, time.Second
	allowed, toFull = formula(cc, attempts)
	e := func(n float64) float64 { return math.Exp(-n) }
	require.InDelta(t, 1+1-(e(1)-e(2)-e(3))/(e(1)+e(2)+e(3)+1), allowed, 1e-9)
	require.Equal(t, time.Second, toFull)
}

// The client-side row counts what reached the partner during the failure,
// and when sends keep up with attempts again.
func TestClientSummary(t *testing.T) {
	cc := clientConfig{healthy: 2 * time.Second, failFor: 2 * time.Second, k: 2, window: time.Second}
	var run clientRun
	for i := range 600 { // 100 a second for 6 s
		at := time.Duration(i) * 10 * time.Millisecond
		run.attempts = append(run.attempts, at)
		switch {
		case at < 2*time.Second, at >= 4700*time.Millisecond:
			run.sent = append(run.sent, at)
		case at < 4*time.Second && i%10 == 0: // 1 in 10 during the failure
			run.sent = append(run.sent, at)
		case at >= 4*time.Second && i%2 == 0: // half until 4.7 s
			run.sent = append(run.sent, at)
		}
	}
	s := clientSummary(cc, run)
	require.Equal(t, 200, s.attempts)
	require.Equal(t, 20, s.sent)
	require.Equal(t, 700*time.Millisecond, s.toFull)
}

// Each variant serves an idle server's request, and a static limit
// refuses a tenant's request beyond its limit with 429, and only that
// tenant's.
func TestVariants(t *testing.T) {
	c := testConfig()
	for _, v := range variants {
		p, entered, release := blockingPool(100, 100)
		h, limit, err := v.build(c, p)
		require.NoError(t, err, v.name)
		do := func(tenant string) chan int {
			code := make(chan int, 1)
			go func() {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-Tenant", tenant)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				code <- w.Code
			}()
			return code
		}
		n := int(limit().key)
		if strings.HasPrefix(v.name, "static") {
			require.Equal(t, map[string]int{"static-2x-high": 16, "static-2x-low": 4}[v.name], n)
			var held []chan int
			for range n {
				held = append(held, do("t0"))
				<-entered
			}
			require.Equal(t, http.StatusTooManyRequests, <-do("t0"), v.name)
			held = append(held, do("t1")) // another tenant is not refused
			<-entered
			for range held {
				release <- struct{}{}
			}
			for _, code := range held {
				require.Equal(t, http.StatusOK, <-code)
			}
		} else {
			code := do("t0")
			<-entered
			release <- struct{}{}
			require.Equal(t, http.StatusOK, <-code, v.name)
		}
	}
}

// The plot is well-formed SVG with a line for each variant in each panel.
func TestPlot(t *testing.T) {
	c := testConfig()
	runs := []variantRun{
		{name: "a", records: []record{{arrival: arrival{at: time.Second}, latency: 10 * time.Millisecond, outcome: ok}}, limits: []sample{{0, limits{4, 4, noLimit().overall}}, {time.Second, limits{4, 4, noLimit().overall}}}},
		{name: "b & c", limits: []sample{{0, noLimit()}}, records: []record{{arrival: arrival{at: time.Second}, outcome: refused}}},
		{name: "d", limits: []sample{{0, limits{3, 1, 9}}}},
	}
	var b strings.Builder
	require.NoError(t, writeSVG(&b, "t", c.duration.Seconds(), panels(c, runs)))
	d := xml.NewDecoder(strings.NewReader(b.String()))
	paths := 0
	for {
		tok, err := d.Token()
		if err != nil {
			require.Equal(t, "EOF", err.Error())
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "path" {
			paths++
		}
	}
	// goodput: capacity, a, b, d; limit: workers, a, d and d's overall (b
	// has none); p99: a (b and d admitted nothing).
	require.Equal(t, 4+4+1, paths)
	require.Contains(t, b.String(), "b &amp; c")
	require.Equal(t, 2, strings.Count(b.String(), ">d: "), "a legend entry for each of d's limits")
	require.NotContains(t, b.String(), ">b &amp; c: ", "none for b's, which has no limit")
}
