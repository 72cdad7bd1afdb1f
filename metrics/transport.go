package metrics

import (
	"context"
	"errors"
	"net/http"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/prometheus/client_golang/prometheus"
)

// waitBuckets are the upper bounds, in seconds, of the Transport's wait
// histogram: from no wait at all (0) to a minute, the scale of a client's
// own pacing and of a server's Retry-After.
var waitBuckets = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Transport counts what the requests of an httplimit.Transport waited for:
// a prometheus.Collector whose OnWait method is a Transport.OnWait hook,
// called once a request. Its series carry limiter=name:
//
//	keylimit_transport_requests_total{outcome}  counter
//	keylimit_transport_wait_seconds{paused}     histogram of Wait.Waited
//	keylimit_transport_retries_total            counter, Wait.Retries summed
//	keylimit_transport_queued_total             counter, the requests with Wait.Queued
//	keylimit_transport_dropped_pauses_total     counter, Wait.DroppedPauses summed
//
// outcome is "sent", "deadline", "canceled" or "error" (see OnWait); paused
// is "true" for the requests a server's pause held. The histogram's buckets
// run from 0 (no wait) to 60 s. Never a key: all these
// series exist from the start, at 0.
type Transport struct {
	Collector
	waits   [waitOutcomes]prometheus.Counter
	waited  [2]prometheus.Observer // by paused: 0 false, 1 true
	retries prometheus.Counter
	queued  prometheus.Counter
	dropped prometheus.Counter
}

// waitOutcome is the outcome label of a wait.
type waitOutcome uint8

const (
	sent waitOutcome = iota
	deadline
	canceled
	waitFailed
	waitOutcomes
)

var waitOutcomeNames = [waitOutcomes]string{sent: "sent", deadline: "deadline", canceled: "canceled", waitFailed: "error"}

// NewTransport returns the metrics of a Transport whose series carry the
// label limiter=name ("partner"). Registering t fails if name is empty or
// not valid UTF-8.
func NewTransport(name string) *Transport {
	t := &Transport{Collector: Collector{err: checkName("Transport metrics", name)}}
	labels := prometheus.Labels{labelLimiter: name}
	if t.err != nil {
		labels = nil // never collected; Describe reports t.err
	}
	waits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace:   namespace,
		Name:        "transport_requests_total",
		Help:        "Requests through the Transport, by the outcome of their wait (sent, deadline, canceled or error).",
		ConstLabels: labels,
	}, []string{labelOutcome})
	waited := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:   namespace,
		Name:        "transport_wait_seconds",
		Help:        "How long the Transport held a request, over all its sends, by whether a server's pause held it.",
		ConstLabels: labels,
		Buckets:     waitBuckets,
	}, []string{labelPaused})
	t.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace:   namespace,
		Name:        "transport_retries_total",
		Help:        "Requests the Transport sent again after a 429 or 503.",
		ConstLabels: labels,
	})
	t.queued = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace:   namespace,
		Name:        "transport_queued_total",
		Help:        "Requests that waited for a slot of the Transport's Concurrency, every slot of their key being held.",
		ConstLabels: labels,
	})
	t.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace:   namespace,
		Name:        "transport_dropped_pauses_total",
		Help:        "Server pauses the Transport forgot before their end, to keep no more than its MaxPaused.",
		ConstLabels: labels,
	})
	for o := range waitOutcomes {
		t.waits[o] = waits.WithLabelValues(waitOutcomeNames[o])
	}
	t.waited[0], t.waited[1] = waited.WithLabelValues("false"), waited.WithLabelValues("true")
	t.cs = []prometheus.Collector{waits, waited, t.retries, t.queued, t.dropped}
	return t
}

// OnWait counts the request whose wait w is: set it as Transport.OnWait, or
// call it from a hook of yours. The outcome is "sent" if w.Err is nil,
// else by what w.Err matches: keylimit.ErrWouldExceedDeadline or
// context.DeadlineExceeded "deadline" (the wait would have outlasted the
// request's deadline, or did), context.Canceled "canceled", anything else
// (keylimit.ErrExceedsLimit) "error". It allocates nothing. r is not read.
func (t *Transport) OnWait(r *http.Request, w httplimit.Wait) {
	if t.err != nil {
		return
	}
	o := sent
	switch err := w.Err; {
	case err == nil:
	case errors.Is(err, keylimit.ErrWouldExceedDeadline), errors.Is(err, context.DeadlineExceeded):
		o = deadline
	case errors.Is(err, context.Canceled):
		o = canceled
	default:
		o = waitFailed
	}
	t.waits[o].Inc()
	paused := 0
	if w.Paused {
		paused = 1
	}
	t.waited[paused].Observe(w.Waited.Seconds())
	if w.Retries > 0 {
		t.retries.Add(float64(w.Retries))
	}
	if w.Queued {
		t.queued.Inc()
	}
	if w.DroppedPauses > 0 {
		t.dropped.Add(float64(w.DroppedPauses))
	}
}
