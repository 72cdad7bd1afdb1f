package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/keylimit/keylimit/quota"
	"github.com/prometheus/client_golang/prometheus"
)

// decisionBuckets are the upper bounds, in seconds, of the decision latency
// histogram: 1 µs to 100 ms, by 1, 2.5 and 5 a decade. An in-memory
// decision takes microseconds, a Redis one a round trip.
var decisionBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 1e-1,
}

// HTTP counts the decisions of an httplimit middleware, or of a grpclimit
// server: a prometheus.Collector whose OnDecision method is httplimit's
// Config.OnDecision hook, and whose Observe counts any quota.Decision.
// Its series carry limiter=name:
//
//	keylimit_http_decisions_total{tier, policy, outcome}  counter
//	keylimit_http_decision_seconds{tier}                  histogram of Decision.Elapsed
//
// The histogram's buckets run from 1 µs to 100 ms, by 1, 2.5 and 5 a decade.
// outcome is "allowed", "refused", "untracked" or "error" (see OnDecision).
// tier and policy are names from the middleware's Config, never a key, so
// the series are as many as the tiers, policies and outcomes met.
type HTTP struct {
	Collector
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec

	// series maps the labels met so far to their series, so that a decision
	// finds its series by one map lookup that allocates nothing. Replaced
	// whole (copy on write) under mu when a decision meets new labels,
	// which happens at most once for each of the boundedly many label sets.
	series atomic.Pointer[map[httpLabels]httpSeries]
	mu     sync.Mutex
}

// httpLabels are the labels of one decision's series.
type httpLabels struct {
	tier, policy string
	outcome      outcome
}

// httpSeries are the series a decision with some httpLabels adds to.
type httpSeries struct {
	decisions prometheus.Counter
	latency   prometheus.Observer
}

// outcome is the outcome label of a decision.
type outcome uint8

const (
	allowed outcome = iota
	refused
	untracked
	failed
)

var outcomeNames = [...]string{allowed: outcomeAllowed, refused: outcomeRefused, untracked: "untracked", failed: "error"}

// NewHTTP returns the metrics of a middleware whose series carry the label
// limiter=name ("api"). Give each middleware its own HTTP, under names that
// differ, or share one between middlewares of the same policies.
// Registering h fails if name is empty or not valid UTF-8.
func NewHTTP(name string) *HTTP {
	h := &HTTP{Collector: Collector{err: checkName("HTTP metrics", name)}}
	labels := prometheus.Labels{labelLimiter: name}
	if h.err != nil {
		labels = nil // the Vecs are never used; Describe reports h.err
	}
	h.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace:   namespace,
		Name:        "http_decisions_total",
		Help:        "Requests the middleware decided, by tier, binding policy and outcome (allowed, refused, untracked or error).",
		ConstLabels: labels,
	}, []string{labelTier, labelPolicy, labelOutcome})
	h.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:   namespace,
		Name:        "http_decision_seconds",
		Help:        "How long the middleware took to decide a request, by tier.",
		ConstLabels: labels,
		Buckets:     decisionBuckets,
	}, []string{labelTier})
	h.series.Store(&map[httpLabels]httpSeries{})
	h.cs = []prometheus.Collector{h.decisions, h.latency}
	return h
}

// OnDecision counts d under its tier, its binding policy and its outcome,
// and observes d.Elapsed: set it as httplimit's Config.OnDecision, or call
// it from yours (beside a hook of your own, or for a grpclimit server, whose
// calls it counts as requests; r is then nil):
//
//	OnDecision: func(_ context.Context, _ string, d quota.Decision) { api.OnDecision(nil, d) },
//
// The outcome is "error" if d.Result.Err is set
// (the middleware calls OnDecision with one only in a dry run), else
// "untracked" if the key cap left the key untracked (d.Result.Untracked),
// admitted or not, else "allowed" or "refused"; in a dry run, "refused"
// counts the requests that would have been refused. It allocates nothing
// once a tier, policy and outcome have been met. r is not read.
func (h *HTTP) OnDecision(r *http.Request, d quota.Decision) {
	if h.err != nil {
		return
	}
	l := httpLabels{tier: d.Tier, policy: d.Policy}
	switch res := d.Result; {
	case res.Err != nil:
		l.outcome = failed
	case res.Untracked:
		l.outcome = untracked
	case res.Allowed:
		l.outcome = allowed
	default:
		l.outcome = refused
	}
	s, ok := (*h.series.Load())[l]
	if !ok {
		s = h.add(l)
	}
	s.decisions.Inc()
	s.latency.Observe(d.Elapsed.Seconds())
}

// add returns the series of l, made and added to h.series if they are new.
func (h *HTTP) add(l httpLabels) httpSeries {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.series.Load()
	if s, ok := old[l]; ok {
		return s // another decision added them first
	}
	s := httpSeries{
		decisions: h.decisions.WithLabelValues(l.tier, l.policy, outcomeNames[l.outcome]),
		latency:   h.latency.WithLabelValues(l.tier),
	}
	m := make(map[httpLabels]httpSeries, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[l] = s
	h.series.Store(&m)
	return s
}
