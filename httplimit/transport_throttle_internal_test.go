package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// Throttle's counts are bounded by MaxPaused, as the pauses are: requests
// under 5,000 keys that fail, from a Transport with MaxPaused 500, leave at
// most 500 keys counted.
func TestTransportThrottleKeysAreBounded(t *testing.T) {
	tr := &Transport{
		Throttle: 2, MaxPaused: 500, Clock: clock.NewMock(),
		Key:  func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
		Base: roundTrip(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") }),
	}
	for i := range 5000 {
		req, _ := http.NewRequest(http.MethodGet, "http://partner.test/", nil)
		req.Header.Set("X-Key", strconv.Itoa(i))
		tr.RoundTrip(req)
		n, _, _ := tr.throttle.Len()
		require.LessOrEqual(t, n, 500)
	}
	n, dropped, _ := tr.throttle.Len()
	require.Equal(t, uint64(5000-n), dropped, "every key is counted or was dropped")
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
