package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
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
	require.Equal(t, 9, testutil.CollectAndCount(tm), "series before any request: 4 outcomes, 2 histograms, retries, queued, dropped pauses")

	wrap := func(err error) error { return &httplimit.TransportError{Key: "api.example", Err: err} }
	for _, w := range []httplimit.Wait{
		{Key: "api.example", Waited: 0},
		{Key: "api.example", Waited: 300 * time.Millisecond, Queued: true},
		{Key: "api.example", Waited: 2 * time.Second, Paused: true, Retries: 1, DroppedPauses: 3},
		{Key: "api.example", Waited: 40 * time.Second, Paused: true, Retries: 2},
		{Key: "api.example", Err: wrap(fmt.Errorf("%w (%w)", keylimit.ErrWouldExceedDeadline, context.DeadlineExceeded))},
		{Key: "api.example", Waited: time.Millisecond, Err: wrap(context.DeadlineExceeded)},
		{Key: "api.example", Waited: 5 * time.Millisecond, Queued: true, Err: wrap(context.Canceled)},
		{Key: "api.example", Err: wrap(keylimit.ErrExceedsLimit)},
		{Key: "api.example", Err: errors.New("something else")},
	} {
		tm.OnWait(nil, w)
	}
	want := `
# HELP keylimit_transport_dropped_pauses_total Server pauses the Transport forgot before their end, to keep no more than its MaxPaused.
# TYPE keylimit_transport_dropped_pauses_total counter
keylimit_transport_dropped_pauses_total{limiter="partner"} 3
# HELP keylimit_transport_queued_total Requests that waited for a slot of the Transport's Concurrency, every slot of their key being held.
# TYPE keylimit_transport_queued_total counter
keylimit_transport_queued_total{limiter="partner"} 2
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

// TestTransportOnWait: a real Transport's requests, through the hook: one
// sent after a 429 and a retry, two sent and one refused a wait past its
// deadline by a limiter of 2 a second on a mock clock, one whose context
// had ended.
func TestTransportOnWait(t *testing.T) {
	tm := metrics.NewTransport("partner")
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(tm), "Register")
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(partner.Close)
	get := func(client *http.Client, ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		require.NoError(t, err, "NewRequest")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	retrying := &http.Client{Transport: &httplimit.Transport{Retries: 1, Backoff: time.Millisecond, OnWait: tm.OnWait}}
	require.NoError(t, get(retrying, context.Background()), "sent again after a 429")

	mock := clock.NewMock()
	perSecond, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	require.NoError(t, err, "NewTokenBucket")
	t.Cleanup(func() { perSecond.Close() })
	paced := &http.Client{Transport: &httplimit.Transport{Limiter: perSecond, Clock: mock, OnWait: tm.OnWait}}
	for i := range 3 {
		ctx, cancel := mock.WithTimeout(context.Background(), 100*time.Millisecond)
		err := get(paced, ctx)
		cancel()
		if i < 2 {
			require.NoError(t, err, "request %d, within the burst", i)
		} else {
			require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline, "request %d, 500 ms away", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, get(paced, ctx), context.Canceled, "a request whose context has ended")

	want := `
# HELP keylimit_transport_requests_total Requests through the Transport, by the outcome of their wait (sent, deadline, canceled or error).
# TYPE keylimit_transport_requests_total counter
keylimit_transport_requests_total{limiter="partner",outcome="canceled"} 1
keylimit_transport_requests_total{limiter="partner",outcome="deadline"} 1
keylimit_transport_requests_total{limiter="partner",outcome="error"} 0
keylimit_transport_requests_total{limiter="partner",outcome="sent"} 3
# HELP keylimit_transport_retries_total Requests the Transport sent again after a 429 or 503.
# TYPE keylimit_transport_retries_total counter
keylimit_transport_retries_total{limiter="partner"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keylimit_transport_requests_total", "keylimit_transport_retries_total"), "the scrape")
	require.Equal(t, map[string]uint64{"false": 5, "true": 0}, histogramCounts(t, reg, "keylimit_transport_wait_seconds", "paused"), "waits by paused")
	require.Equal(t, int32(4), calls.Load(), "requests the partner saw: a 429, its retry, two paced")
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
