package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The helpers of the package's tests. Assertions: testify's require, on the
// test's goroutine only.

// fixedWindow returns a FixedWindow of quota events an hour on a mock clock
// at the epoch, with opts, closed when the test ends.
func fixedWindow(t *testing.T, quota int, opts ...keylimit.Option) (*keylimit.FixedWindow[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	opts = append([]keylimit.Option{keylimit.WithClock(mock), keylimit.WithEvictionInterval(0)}, opts...)
	lim, err := keylimit.NewFixedWindow[string](keylimit.PerHour(quota), opts...)
	require.NoError(t, err, "NewFixedWindow")
	t.Cleanup(func() { lim.Close() })
	return lim, mock
}

// allows makes the calls of Allow in calls, in order, and returns how many
// were admitted.
func allows(lim keylimit.Limiter[string], calls ...string) (admitted int) {
	for _, key := range calls {
		if lim.Allow(key) {
			admitted++
		}
	}
	return admitted
}

// fixedStats has a limiter's Stats method, which returns st and counts its calls.
type fixedStats struct {
	st    keylimit.Stats
	calls atomic.Int64
}

func (f *fixedStats) Stats() keylimit.Stats {
	f.calls.Add(1)
	return f.st
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// statuses sends h one GET request for each key, keyed by X-API-Key, and
// returns the statuses of the answers.
func statuses(h http.Handler, keys ...string) []int {
	var codes []int
	for _, key := range keys {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	return codes
}

// histogramCounts gathers reg and returns the sample count of each series
// of the histogram name, by the value of its label label.
func histogramCounts(t *testing.T, reg prometheus.Gatherer, name, label string) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err, "Gather")
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					counts[lp.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return counts
}

// gatherer returns a registry holding c alone.
func gatherer(c prometheus.Collector) prometheus.Gatherer {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	return reg
}
