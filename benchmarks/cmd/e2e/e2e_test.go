package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every contender answers hello-world with 200 to every request, and each
// limiting one says so in its fields: a contender that refused, or limited
// nothing, would make the table meaningless. (The measurement itself is
// not a test: it takes minutes, and wrk.)
func TestContenders(t *testing.T) {
	field := map[string]string{
		"bare":               "",
		"keylimit-httplimit": "RateLimit",
		"floor-two-fields":   "RateLimit",
		// Admitted, so no field: see TestFieldsOnRefusal in httplimit.
		"keylimit-fields-on-refusal": "",
		"go-chi-httprate":            "X-RateLimit-Remaining",
		"ulule-limiter":              "X-RateLimit-Remaining",
	}
	require.Len(t, contenders, len(field))
	for _, c := range contenders {
		h, err := c.wrap(helloHandler)
		require.NoError(t, err, c.name)
		for i := range 100 {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "192.0.2.1:40000"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, http.StatusOK, w.Code, "%s, request %d", c.name, i)
			require.Equal(t, string(hello), w.Body.String(), c.name)
			if name := field[c.name]; name != "" {
				require.NotEmpty(t, w.Header().Get(name), "%s sends %s", c.name, name)
			} else {
				require.Empty(t, w.Header().Get("RateLimit")+w.Header().Get("X-RateLimit-Remaining"), c.name)
			}
		}
	}
}

// parseWrk reads wrk's counts, and fails a run in which a request was
// refused or a connection failed; a timeout is only slow.
func TestParseWrk(t *testing.T) {
	const run = `Running 10s test @ http://127.0.0.1:40123/
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   310.42us  101.23us   5.12ms   90.12%
    Req/Sec   103.12k     2.01k  106.83k    71.00%
  1026010 requests in 10.00s, 119.38MB read
`
	got, err := parseWrk(run + "Requests/sec: 102598.64\nTransfer/sec:     11.94MB\n")
	require.NoError(t, err)
	require.Equal(t, wrkResult{requests: 1026010, perSecond: 102598.64}, got)

	_, err = parseWrk(run + "  Non-2xx or 3xx responses: 12\nRequests/sec: 102598.64\n")
	require.ErrorContains(t, err, "Non-2xx or 3xx responses: 12")
	_, err = parseWrk(run + "  Socket errors: connect 0, read 3, write 0, timeout 0\nRequests/sec: 102598.64\n")
	require.ErrorContains(t, err, "read 3")
	got, err = parseWrk(run + "  Socket errors: connect 0, read 0, write 0, timeout 7\nRequests/sec: 102598.64\n")
	require.NoError(t, err, "a request slower than 2 s is the machine's, not a failure")
	require.Equal(t, 102598.64, got.perSecond)
	_, err = parseWrk(run)
	require.ErrorContains(t, err, "no count")
}

func TestTableNumbers(t *testing.T) {
	require.Equal(t, "0", commas(0))
	require.Equal(t, "999", commas(999.4))
	require.Equal(t, "1,000", commas(999.5))
	require.Equal(t, "102,599", commas(102598.64))
	require.Equal(t, "1,234,567", commas(1234567))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
}
