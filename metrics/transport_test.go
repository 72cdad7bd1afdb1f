//go:build keylimit_waithook

package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestTransportOutcomes: each outcome, the waits by whether a pause held
// them, and the retries, from Waits made up to the nanosecond; every series
// is there from the start.
func TestTransportOutcomes(t *testing.T) {
	tm := metrics.NewTransport("partner")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(tm), "Register")
	require.Equal(t, 7, testutil.CollectAndCount(tm), "series before any request: 4 outcomes, 2 histograms, retries")

	wrap := func(err error) error { return &httplimit.TransportError{Key: "api.example", Err: err} }
	for _, w := range []httplimit.Wait{
		{Key: "api.example", Waited: 0},
		{Key: "api.example", Waited: 300 * time.Millisecond},
		{Key: "api.example", Waited: 2 * time.Second, Paused: true, Retries: 1},
		{Key: "api.example", Waited: 40 * time.Second, Paused: true, Retries: 2},
		{Key: "api.example", Err: wrap(fmt.Errorf("%w (%w)", keylimit.ErrWouldExceedDeadline, context.DeadlineExceeded))},
		{Key: "api.example", Waited: time.Millisecond, Err: wrap(context.DeadlineExceeded)},
		{Key: "api.example", Waited: 5 * time.Millisecond, Err: wrap(context.Canceled)},
		{Key: "api.example", Err: wrap(keylimit.ErrExceedsLimit)},
		{Key: "api.example", Err: errors.New("something else")},
	} {
		tm.OnWait(nil, w)
	}
	want := `
# HELP keylimit_transport_retries_total Requests the Transport sent again after a 429 or 503.
# TYPE keylimit_transport_retries_total counter
keylimit_transport_retries_total{limiter="partner"} 3
# HELP keylimit_transport_wait_seconds How long the Transport held a request, over all its sends, by whether a server's pause held it.
# TYPE keylimit_transport_wait_seconds histogram
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0"} 4
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0.001"} 5
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0.01"} 6
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0.1"} 6
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0.25"} 6
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="0.5"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="1"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="2.5"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="5"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="10"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="30"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="60"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="false",le="+Inf"} 7
keylimit_transport_wait_seconds_sum{limiter="partner",paused="false"} 0.306
keylimit_transport_wait_seconds_count{limiter="partner",paused="false"} 7
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0.001"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0.01"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0.1"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0.25"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="0.5"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="1"} 0
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="2.5"} 1
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="5"} 1
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="10"} 1
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="30"} 1
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="60"} 2
keylimit_transport_wait_seconds_bucket{limiter="partner",paused="true",le="+Inf"} 2
keylimit_transport_wait_seconds_sum{limiter="partner",paused="true"} 42
keylimit_transport_wait_seconds_count{limiter="partner",paused="true"} 2
# HELP keylimit_transport_requests_total Requests through the Transport, by the outcome of their wait (sent, deadline, canceled or error).
# TYPE keylimit_transport_requests_total counter
keylimit_transport_requests_total{limiter="partner",outcome="canceled"} 1
keylimit_transport_requests_total{limiter="partner",outcome="deadline"} 2
keylimit_transport_requests_total{limiter="partner",outcome="error"} 2
keylimit_transport_requests_total{limiter="partner",outcome="sent"} 4
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)), "the scrape")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err, "GatherAndLint")
	require.Empty(t, problems, "what promlint finds")
}

// TestTransportAllocs: OnWait allocates nothing, an error's wait included.
func TestTransportAllocs(t *testing.T) {
	tm := metrics.NewTransport("partner")
	ok := httplimit.Wait{Key: "api.example", Waited: time.Millisecond}
	failed := httplimit.Wait{Key: "api.example", Err: &httplimit.TransportError{Err: context.Canceled}}
	require.Zero(t, testing.AllocsPerRun(1000, func() { tm.OnWait(nil, ok); tm.OnWait(nil, failed) }), "allocations of OnWait")
}

// TestTransportNames: an empty name or one that is not UTF-8 fails to
// register, and its OnWait counts nothing.
func TestTransportNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewTransport("partner")), "partner")
	require.ErrorAs(t, reg.Register(metrics.NewTransport("partner")), new(prometheus.AlreadyRegisteredError), "partner again")
	for name, want := range map[string]string{
		"":     "metrics: the name of Transport metrics is empty",
		"\xff": `metrics: the name "\xff" of Transport metrics is not valid UTF-8`,
	} {
		tm := metrics.NewTransport(name)
		require.ErrorContains(t, reg.Register(tm), want, "name %q", name)
		tm.OnWait(nil, httplimit.Wait{})
		ch := make(chan prometheus.Metric, 10)
		tm.Collect(ch)
		require.Zero(t, len(ch), "series of the metrics named %q", name)
	}
}
