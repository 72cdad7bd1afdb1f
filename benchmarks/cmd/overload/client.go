package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// clientConfig is the client-side run: a client sends open-loop to a
// partner that is healthy for healthy, fails every request for failFor,
// then is healthy again for healthy.
type clientConfig struct {
	rate    float64       // the client's attempts a second
	healthy time.Duration // before the failure, and after it
	failFor time.Duration
	k       int           // K of the throttling formula
	window  time.Duration // the time constant of the counts, the Transport's and the formula's
}

func (cc clientConfig) failFrom() time.Duration { return cc.healthy }
func (cc clientConfig) failTo() time.Duration   { return cc.healthy + cc.failFor }
func (cc clientConfig) end() time.Duration      { return 2*cc.healthy + cc.failFor }

// clientRun is what the client-side run recorded, in time since its start.
type clientRun struct {
	attempts []time.Duration // when the client's code asked the Transport to send
	sent     []time.Duration // when the partner received a request
}

// runClient serves the partner on a free port of 127.0.0.1 and sends it
// cc's load through the client's Transport.
func runClient(cc clientConfig) (clientRun, error) {
	var mu sync.Mutex
	var run clientRun
	var start time.Time
	var failing atomic.Bool
	partner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Since(start)
		mu.Lock()
		run.sent = append(run.sent, at)
		mu.Unlock()
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return run, err
	}
	srv := &http.Server{Handler: partner, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	base := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: clientTransport(cc, base)}

	arrivals := loadSpec{rate: cc.rate, duration: cc.end(), weights: []int{1}}.schedule()
	start = time.Now()
	var sends sync.WaitGroup
	for _, a := range arrivals {
		if d := time.Until(start.Add(a.at)); d > 0 {
			time.Sleep(d)
		}
		failing.Store(a.at >= cc.failFrom() && a.at < cc.failTo())
		run.attempts = append(run.attempts, a.at)
		sends.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return
			}
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	sends.Wait()
	mu.Lock()
	defer mu.Unlock()
	return run, nil
}

// formula returns how many of the attempts during the failure the
// throttling formula of Google's SRE book lets through, in expectation:
// each attempt at t is sent with probability 1 − max(0, (requests −
// K·accepts)/(requests + 1)), requests being the attempts before t and
// accepts the expected sends before t that a healthy partner accepted, each
// weighing e^(−age/window) as httplimit.Transport's counts do. It also
// returns how long after the failure the formula first lets through 95% of
// an attempt (-1 if never).
func formula(cc clientConfig, attempts []time.Duration) (allowed float64, toFull time.Duration) {
	var requests, accepts float64
	var last time.Duration
	toFull = -1
	for _, at := range attempts {
		decay := math.Exp(-float64(at-last) / float64(cc.window))
		requests, accepts, last = requests*decay, accepts*decay, at
		p := max(0, (requests-float64(cc.k)*accepts)/(requests+1))
		failing := at >= cc.failFrom() && at < cc.failTo()
		if failing {
			allowed += 1 - p
		}
		if at >= cc.failTo() && toFull < 0 && p <= 0.05 {
			toFull = at - cc.failTo()
		}
		requests++
		if !failing {
			accepts += 1 - p
		}
	}
	return allowed, toFull
}

// clientStats is the client-side row.
type clientStats struct {
	attempts, sent int // during the failure
	allowed        float64
	toFull         time.Duration // measured: from the recovery until sends keep up with attempts
	formulaToFull  time.Duration
}

// fullRateWindow is the span over which the client is judged back to full
// rate for good: from the first window after the recovery, starting at a
// multiple of recoveryStep, from which on the partner receives 95% of the
// attempts in every window until the end.
const fullRateWindow = 500 * time.Millisecond

func clientSummary(cc clientConfig, run clientRun) clientStats {
	var s clientStats
	in := func(t time.Duration) bool { return t >= cc.failFrom() && t < cc.failTo() }
	for _, a := range run.attempts {
		if in(a) {
			s.attempts++
		}
	}
	for _, t := range run.sent {
		if in(t) {
			s.sent++
		}
	}
	s.allowed, s.formulaToFull = formula(cc, run.attempts)
	s.toFull = -1
	count := func(ts []time.Duration, from, to time.Duration) int {
		n := 0
		for _, t := range ts {
			if t >= from && t < to {
				n++
			}
		}
		return n
	}
	var starts []time.Duration
	for from := cc.failTo(); from+fullRateWindow <= cc.end(); from += recoveryStep {
		starts = append(starts, from)
	}
	for _, from := range slices.Backward(starts) {
		a := count(run.attempts, from, from+fullRateWindow)
		if a == 0 || float64(count(run.sent, from, from+fullRateWindow)) < 0.95*float64(a) {
			break
		}
		s.toFull = from - cc.failTo()
	}
	return s
}

func clientTable(w io.Writer, cc clientConfig, run clientRun) {
	s := clientSummary(cc, run)
	fmt.Fprintf(w, "Client side: %.0f attempts a second through httplimit.Transport to a partner that answers 503 to every request for %s (formula: K=%d, counts decaying as e^(−age/%s)).\n\n", cc.rate, cc.failFor, cc.k, cc.window)
	fmt.Fprintln(w, "| attempts during the failure | sent to the partner | the formula allows | sent / allowed | to full rate after recovery | the formula's |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	fmt.Fprintf(w, "| %d | %d | %.0f | %.2f | %s | %s |\n", s.attempts, s.sent, s.allowed, float64(s.sent)/s.allowed, seconds(s.toFull), seconds(s.formulaToFull))
}

func clientTargets(cc clientConfig, run clientRun) []check {
	s := clientSummary(cc, run)
	return []check{
		{fmt.Sprintf("sends %d during the failure ≤ 1.2× the formula's %.0f", s.sent, s.allowed), float64(s.sent) <= 1.2*s.allowed},
		{fmt.Sprintf("back to full rate %s ≤ 2 s after recovery", seconds(s.toFull)), s.toFull >= 0 && s.toFull <= 2*time.Second},
	}
}

// clientTransport is the client's Transport over base: httplimit's, with
// its adaptive throttling once it has one.
func clientTransport(cc clientConfig, base http.RoundTripper) http.RoundTripper {
	return newTransport(cc, base)
}
