package metrics

import (
	"fmt"

	"github.com/keylimit/keylimit"
	"github.com/prometheus/client_golang/prometheus"
)

// statsCollector collects one limiter's Stats, labelled limiter=name.
type statsCollector struct {
	lim interface{ Stats() keylimit.Stats }
	// One Desc per series, each with the const label limiter=name.
	keys, decisions, untracked, evicted *prometheus.Desc
	calls, errors, fallbacks, cacheHits *prometheus.Desc
	scriptErrors                        *prometheus.Desc
	bans, banRefused                    *prometheus.Desc
	limit, shed                         *prometheus.Desc
}

// NewStats returns a collector of lim's Stats (every keylimit limiter has
// them, and every redislimit one) whose series carry the label
// limiter=name: "login", "api". It reads Stats when scraped and at no
// other time, so it adds nothing to the limiter's decisions; see the
// package documentation for the series it exports. Register it once per
// limiter, under names that differ; registering fails if the name is empty
// or not valid UTF-8, or lim is nil.
func NewStats(name string, lim interface{ Stats() keylimit.Stats }) *Collector {
	labels := prometheus.Labels{labelLimiter: name}
	err := checkName("a limiter's stats", name)
	if err == nil && lim == nil {
		err = fmt.Errorf("metrics: the limiter of stats %q is nil", name)
	}
	if err != nil {
		return &Collector{err: err}
	}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, variable, labels)
	}
	return &Collector{cs: []prometheus.Collector{&statsCollector{
		lim:       lim,
		keys:      desc("keys", "Keys the limiter tracks now."),
		decisions: desc("decisions_total", "Requests the limiter decided, by outcome (allowed or refused); only from a limiter that counts them (keylimit.WithStats).", labelOutcome),
		untracked: desc("untracked_total", "Requests for keys the key cap left untracked (keylimit.WithMaxKeys)."),
		evicted:   desc("evicted_total", "Idle keys the limiter forgot."),
		calls:     desc("store_calls_total", "Round trips to the remote store."),
		errors:    desc("store_errors_total", "Round trips to the remote store that failed."),
		scriptErrors: desc("store_script_errors_total",
			"Round trips whose script failed on the remote store (a bug or an incompatibility, not an outage; not in store_errors_total)."),
		fallbacks:  desc("store_fallbacks_total", "Decisions made by the failure policy instead of the remote store."),
		cacheHits:  desc("store_cache_hits_total", "Refusals answered from the local deny cache, without a round trip."),
		bans:       desc("bans_total", "Bans a penalty (keylimit.Penalty) started: keys refused too often, refused outright for a while."),
		banRefused: desc("ban_refusals_total", "Requests a penalty refused by a ban, without asking its limiter."),
		limit:      desc("limit", "The limit now: an adaptive limiter's overall limit (adaptive.Limiter), which moves, or a concurrency limiter's."),
		shed:       desc("shed_total", "Requests an adaptive limiter shed, by criticality (critical, default or sheddable).", labelCriticality),
	}}}
}

// Describe sends the Desc of every series c may export.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{c.keys, c.decisions, c.untracked, c.evicted, c.calls, c.errors, c.scriptErrors, c.fallbacks, c.cacheHits, c.bans, c.banRefused, c.limit, c.shed} {
		ch <- d
	}
}

// Collect reads the limiter's Stats once and sends the series of the counts
// the limiter keeps (Stats.Decisions, Stats.Remote): a count it does not
// keep reads 0, which is no count. The decision counters come from an
// in-memory limiter made WithStats, or a remote one; the store counters
// from a remote one (redislimit's), whose keys live in the store, so that
// keys, untracked and evicted come only from an in-memory one; the ban
// counters from a penalty (Stats.Penalty); the limit from a limiter that
// reports one (Stats.Limit: an adaptive or concurrency limiter), and the
// sheds from an adaptive one (Stats.Adaptive).
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.lim.Stats()
	// A count a limiter does not keep reads 0, like one that has counted
	// nothing yet: Stats says which it keeps, and only those are sent.
	remote := st.Remote
	if !remote {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
		ch <- prometheus.MustNewConstMetric(c.untracked, prometheus.CounterValue, float64(st.Untracked))
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(st.Evicted))
	}
	if st.Decisions {
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Admitted), outcomeAllowed)
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Refused), outcomeRefused)
	}
	if remote {
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(st.Calls))
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors))
		ch <- prometheus.MustNewConstMetric(c.scriptErrors, prometheus.CounterValue, float64(st.ScriptErrors))
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(st.Fallbacks))
		ch <- prometheus.MustNewConstMetric(c.cacheHits, prometheus.CounterValue, float64(st.CacheHits))
	}
	if st.Penalty {
		ch <- prometheus.MustNewConstMetric(c.bans, prometheus.CounterValue, float64(st.Bans))
		ch <- prometheus.MustNewConstMetric(c.banRefused, prometheus.CounterValue, float64(st.BanRefused))
	}
	if st.Limit > 0 {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit))
	}
	if st.Adaptive {
		for _, cr := range criticalities {
			ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(st.Shed[cr.c]), cr.label)
		}
	}
}

// criticalities are the values of the criticality label, by Criticality.
var criticalities = [...]struct {
	c     keylimit.Criticality
	label string
}{{keylimit.Critical, "critical"}, {keylimit.Default, "default"}, {keylimit.Sheddable, "sheddable"}}
