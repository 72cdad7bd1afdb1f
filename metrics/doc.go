// Package metrics exports keylimit's counts to Prometheus: what each limiter
// counted (NewStats), what an httplimit middleware decided (NewHTTP) and what
// the requests of an httplimit.Transport waited for (NewTransport), with a
// bounded set of labels. Never a key: a label per client would make a series
// per client.
//
// # Limiter stats
//
// NewStats is a prometheus.Collector of one limiter's Stats, labelled with a
// name you choose:
//
//	reg.MustRegister(metrics.NewStats("login", loginLimiter))
//
// Every series carries limiter="login":
//
//	keylimit_keys                       gauge    keys tracked now
//	keylimit_decisions_total            counter  requests decided, outcome="allowed" or "refused"
//	keylimit_untracked_total            counter  requests of keys the key cap left untracked
//	keylimit_evicted_total              counter  idle keys forgotten
//	keylimit_store_calls_total          counter  round trips to Redis (redislimit)
//	keylimit_store_errors_total         counter  round trips that failed
//	keylimit_store_script_errors_total  counter  round trips whose script failed (not in errors_total)
//	keylimit_store_fallbacks_total      counter  decisions made by the failure policy instead
//	keylimit_store_cache_hits_total     counter  refusals answered from the local deny cache
//	keylimit_bans_total                 counter  bans a penalty (keylimit.Penalty) started
//	keylimit_ban_refusals_total         counter  requests refused by a ban, the limiter not asked
//	keylimit_limit                      gauge    the limit now: an adaptive limiter's overall limit, a concurrency limiter's
//	keylimit_shed_total                 counter  requests an adaptive limiter shed, criticality="critical", "default" or "sheddable"
//
// The collector reads Stats when scraped and at no other time: it starts no
// goroutine and costs a decision nothing. A count a limiter does not keep
// reads 0 in its Stats, and is left out rather than shown as a count of 0:
// decisions are counted only by a limiter made with keylimit.WithStats
// (which costs each decision an atomic add), and keylimit_decisions_total
// appears with the first decision counted; the store counters appear with
// a limiter's first call to its store, and then keys, untracked and
// evicted, which a Redis limiter does not count, are left out.
//
// # HTTP decisions and waits
//
// NewHTTP counts the decisions of an httplimit middleware by tier, binding
// policy and outcome, with a histogram of how long each took
// (Decision.Elapsed); NewTransport counts the requests of an
// httplimit.Transport by the outcome of their wait, with a histogram of the
// time they waited, a count of the retries sent and one of the requests
// that queued for a slot of its Concurrency. Each is a collector
// with a hook method, to set alone or beside a hook of your own:
//
//	api := metrics.NewHTTP("api")
//	reg.MustRegister(api)
//	limit, err := httplimit.New(httplimit.Config{
//		Key:      httplimit.ClientIP{}.Key,
//		Policies: policies,
//		OnDecision: func(r *http.Request, d quota.Decision) {
//			api.OnDecision(r, d)
//			logRefusals(r, d)
//		},
//	})
//
// A hook costs a request one map lookup, an atomic add and a histogram
// observation, and allocates nothing. A grpclimit server's decisions are
// quota Decisions, as the middleware's are: count them with a
// Config.OnDecision that calls api.OnDecision(nil, d).
//
// # OpenTelemetry
//
// The series are Prometheus's; to send them through an OpenTelemetry
// pipeline, either let the OpenTelemetry Collector scrape /metrics with its
// Prometheus receiver, or bridge the registry into the OTel SDK in process
// with go.opentelemetry.io/contrib/bridges/prometheus:
//
//	producer := otelprom.NewMetricProducer(otelprom.WithGatherer(reg))
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(producer))
//
// Counters become OTel sums, gauges gauges and histograms explicit-bucket
// histograms, under the same names and labels (attributes).
package metrics

import (
	"fmt"
	"unicode/utf8"
)

// The names every series shares.
const (
	namespace    = "keylimit"
	labelLimiter = "limiter"
	labelOutcome = "outcome"
	labelTier    = "tier"
	labelPolicy  = "policy"
	labelPaused  = "paused"
	// labelCriticality is a keylimit.Criticality: critical, default or
	// sheddable.
	labelCriticality = "criticality"

	outcomeAllowed = "allowed"
	outcomeRefused = "refused"
)

// checkName returns why name cannot be the limiter label of what, or nil.
// prometheus refuses a label value that is not UTF-8 but takes "", which
// would be no label at all: two limiters named "" would collide.
func checkName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("metrics: the name of %s is empty", what)
	case !utf8.ValidString(name):
		return fmt.Errorf("metrics: the name %q of %s is not valid UTF-8", name, what)
	}
	return nil
}
