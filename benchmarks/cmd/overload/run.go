package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// outcome is what became of one request, as its client saw it.
type outcome uint8

const (
	ok       outcome = iota // 200 within the client's timeout
	refused                 // 429: a limit refused it
	shed                    // 503: shed by a limiter, or the server's queue was full
	timedOut                // no answer within the client's timeout
	failed                  // any other answer or error
)

// record is one request of a run.
type record struct {
	arrival
	latency time.Duration // from the arrival's time to the answer; the timeout if none came
	lag     time.Duration // how late the load generator sent it: the machine's stalls
	outcome outcome
}

// sample is a variant's limits at one time of its run.
type sample struct {
	at time.Duration
	limits
}

// config is a run: the server, the load, what the client waits.
type config struct {
	duration              time.Duration // of each variant's load; the capacity drops at half of it
	workers, workersAfter int
	service               time.Duration
	queue                 int
	load                  float64 // the arrival rate, times the capacity before the drop
	timeout               time.Duration
	weights               []int
	critical              int // per 1000
	poisson               bool
	seed                  uint64
	sampleEvery           time.Duration
}

func (c config) capacityBefore() float64 { return float64(c.workers) / c.service.Seconds() }
func (c config) capacityAfter() float64  { return float64(c.workersAfter) / c.service.Seconds() }
func (c config) drop() time.Duration     { return c.duration / 2 }

func (c config) spec() loadSpec {
	return loadSpec{
		rate: c.load * c.capacityBefore(), duration: c.duration, weights: c.weights,
		critical: c.critical, poisson: c.poisson, seed: c.seed,
	}
}

// variantRun is what one variant's run recorded.
type variantRun struct {
	name     string
	unloaded time.Duration    // the median latency of requests sent one at a time to the idle server
	service  [2]time.Duration // the mean time the work of a request took, in each half
	records  []record
	limits   []sample
}

// runVariant serves a fresh pool behind v on a free port of 127.0.0.1,
// measures its unloaded latency, then sends it the load of c, halving its
// workers midway, and records every request and v's limit over time.
func runVariant(c config, v variant) (variantRun, error) {
	p := newPool(c.workers, c.service, c.queue)
	h, limit, err := v.build(c, p)
	if err != nil {
		return variantRun{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return variantRun{}, err
	}
	srv := &http.Server{Handler: withDeadline(c.timeout, withCriticality(h)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	tr := &http.Transport{MaxIdleConns: 8192, MaxIdleConnsPerHost: 8192, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	run := variantRun{name: v.name}
	if run.unloaded, err = unloaded(client, url, c.timeout); err != nil {
		return run, err
	}

	arrivals := c.spec().schedule()
	run.records = make([]record, len(arrivals))
	start := time.Now()
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	w0, n0 := p.took()  // the unloaded requests'
	var w1, n1 = w0, n0 // at the drop, set by the sampler
	sampler.Go(func() {
		tick := time.NewTicker(c.sampleEvery)
		defer tick.Stop()
		dropped := false
		for {
			at := time.Since(start)
			if !dropped && at >= c.drop() {
				p.setWorkers(c.workersAfter)
				dropped = true
				w1, n1 = p.took()
				run.service[0] = meanOf(w1-w0, n1-n0)
			}
			run.limits = append(run.limits, sample{at: at, limits: limit()})
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	var sends sync.WaitGroup
	for i, a := range arrivals {
		if d := time.Until(start.Add(a.at)); d > 0 {
			time.Sleep(d)
		}
		sends.Go(func() {
			lag := time.Since(start) - a.at
			run.records[i] = send(client, url, start, a, c.timeout)
			run.records[i].lag = lag
		})
	}
	sends.Wait()
	close(stop)
	sampler.Wait()
	w, n := p.took()
	run.service[1] = meanOf(w-w1, n-n1)
	return run, nil
}

// send sends a as the load's client would, and records its answer.
func send(client *http.Client, url string, start time.Time, a arrival, timeout time.Duration) record {
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(a.at+timeout))
	defer cancel()
	r := record{arrival: a}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		r.outcome = failed
		return r
	}
	req.Header.Set("X-Tenant", tenantName(a.tenant))
	if a.critical {
		req.Header.Set("X-Criticality", "critical")
	}
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	r.latency = time.Since(start) - a.at
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.outcome, r.latency = timedOut, timeout
	case err != nil:
		r.outcome = failed
	case resp.StatusCode == http.StatusOK:
		r.outcome = ok
	case resp.StatusCode == http.StatusTooManyRequests:
		r.outcome = refused
	case resp.StatusCode == http.StatusServiceUnavailable:
		r.outcome = shed
	default:
		r.outcome = failed
	}
	return r
}

func tenantName(t int) string { return "t" + strconv.Itoa(t) }

// unloaded is the median latency of 50 requests sent one at a time, after
// 10 that warm the connection and the limiter up.
func unloaded(client *http.Client, url string, timeout time.Duration) (time.Duration, error) {
	var took []time.Duration
	for i := range 60 {
		start := time.Now()
		r := send(client, url, start, arrival{tenant: 1}, timeout)
		if r.outcome != ok {
			return 0, fmt.Errorf("request %d to the idle server: outcome %d", i, r.outcome)
		}
		if i >= 10 {
			took = append(took, r.latency)
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}

func meanOf(total time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return total / time.Duration(n)
}
