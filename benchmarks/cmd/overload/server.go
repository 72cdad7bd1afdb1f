package main

import (
	"net/http"
	"sync"
	"time"
)

// pool is the server of known capacity: workers, each serving one request
// at a time for service, and a first-come-first-served queue of at most
// queue requests waiting for one. Its capacity is workers/service requests
// a second; setWorkers changes it while requests run.
//
// A request in the queue waits for its worker even if its client has gone:
// the work does not read the request's context, as much code does not,
// which is what makes a queue that grows beyond the client's timeout cost
// the server its goodput.
type pool struct {
	service time.Duration
	queue   int
	work    func(time.Duration) // time.Sleep; a test's own to count who works

	mu      sync.Mutex      // protects the fields below
	worked  time.Duration   // the time the work of every request served took, summed
	served  int             // requests served
	workers int             // requests served at once
	busy    int             // requests being served
	waiting []chan struct{} // the queue, oldest first; closed when its turn comes
}

func newPool(workers int, service time.Duration, queue int) *pool {
	return &pool{service: service, queue: queue, work: time.Sleep, workers: workers}
}

// capacity is the requests a second the pool serves when it is never idle.
func (p *pool) capacity() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.workers) / p.service.Seconds()
}

// took returns the time the work of the requests served so far took,
// summed, and their number: a sleep of service takes longer on a busy
// machine, and the pool serves less than its capacity by as much.
func (p *pool) took() (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.worked, p.served
}

// setWorkers changes the number of requests served at once. Requests being
// served finish; none starts until fewer than n are.
func (p *pool) setWorkers(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workers = n
	p.grant()
}

// grant starts the oldest waiters while a worker is free. p.mu is held.
func (p *pool) grant() {
	for p.busy < p.workers && len(p.waiting) > 0 {
		close(p.waiting[0])
		p.waiting = p.waiting[1:]
		p.busy++
	}
}

// serve does one request's work, waiting for a worker first. It reports
// false, having done nothing, if the queue is full.
func (p *pool) serve() bool {
	p.mu.Lock()
	if p.busy < p.workers && len(p.waiting) == 0 {
		p.busy++
		p.mu.Unlock()
	} else {
		if len(p.waiting) >= p.queue {
			p.mu.Unlock()
			return false
		}
		turn := make(chan struct{})
		p.waiting = append(p.waiting, turn)
		p.mu.Unlock()
		<-turn
	}
	start := time.Now()
	p.work(p.service)
	took := time.Since(start)
	p.mu.Lock()
	p.worked += took
	p.served++
	p.busy--
	p.grant()
	p.mu.Unlock()
	return true
}

// ServeHTTP answers 200 once the request's work is done, or 503 at once if
// the queue is full.
func (p *pool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.serve() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
