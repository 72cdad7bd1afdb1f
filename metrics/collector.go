package metrics

import "github.com/prometheus/client_golang/prometheus"

// Collector is the prometheus.Collector this package's constructors make:
// NewStats returns one, and HTTP and Transport embed one, so that each is
// registered as it is (prometheus.MustRegister(metrics.NewHTTP("api"))).
// Registering one fails if its name was empty or not valid UTF-8, or
// NewStats was given no limiter; it then collects nothing. Its zero value
// collects nothing.
type Collector struct {
	err error                  // why the collector cannot be registered, or nil
	cs  []prometheus.Collector // the series Describe and Collect visit
}

// Describe sends the Descs of every series c may export, or one invalid
// Desc that says why c cannot be registered.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	if c.err != nil {
		ch <- prometheus.NewInvalidDesc(c.err)
		return
	}
	for _, s := range c.cs {
		s.Describe(ch)
	}
}

// Collect sends c's series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.err != nil {
		return
	}
	for _, s := range c.cs {
		s.Collect(ch)
	}
}
