package httplimit_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/require"
)

// ok is the handler behind the middleware in the tests: it answers 200
// "ok" and counts its calls.
type ok struct {
	mu    sync.Mutex
	calls int
}

func (h *ok) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	io.WriteString(w, "ok")
}

func (h *ok) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// serve starts a real server on 127.0.0.1 (httptest.NewServer listens
// there, on a free port) running handler, and stops it when the test ends.
func serve(t *testing.T, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// limited returns a middleware built from c, failing the test on an error.
func limited(t testing.TB, c httplimit.Config) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(c)
	require.NoError(t, err)
	return mw
}

// bucket returns a policy on a token bucket of l read on mock.
func bucket(t *testing.T, name string, l keylimit.Limit, mock *clock.Mock, opts ...keylimit.Option) httplimit.Policy {
	t.Helper()
	b, err := keylimit.NewTokenBucket[string](l, append(opts, keylimit.WithClock(mock))...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return httplimit.Policy{Name: name, Limiter: b}
}

// reply is one response, read to its end.
type reply struct {
	status int
	header http.Header
	body   string
}

// get sends a GET to url with the header fields given as name, value
// pairs, over a real connection.
func get(t *testing.T, url string, fields ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Add(fields[i], fields[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(body)}
}

// member is one policy's member of the RateLimit or RateLimit-Policy field.
type member struct {
	name   string
	params map[string]int64
}

// members parses the field name of h with the strict Structured Fields
// parser and checks its shape: a list of Strings, each with Integer
// parameters, none negative; want lists the parameters every member must
// have and no other.
func members(t *testing.T, h http.Header, name string, want ...string) []member {
	t.Helper()
	values := h.Values(name)
	require.Len(t, values, 1, "%s must be one field line", name)
	items, err := parseSFList(values[0])
	require.NoError(t, err, "%s: %q", name, values[0])
	require.NotEmpty(t, items, "%s is empty", name)
	var out []member
	for _, it := range items {
		s, isString := it.value.(string)
		require.True(t, isString, "%s: member %v is not named by a String", name, it.value)
		m := member{name: s, params: map[string]int64{}}
		require.Len(t, it.params, len(want), "%s: member %q: parameters %v, want %v", name, s, it.params, want)
		for _, key := range want {
			n, isInt := it.param(key).(int64)
			require.True(t, isInt, "%s: member %q: %s is %v, not an Integer", name, s, key, it.param(key))
			require.GreaterOrEqual(t, n, int64(0), "%s: member %q: %s is negative", name, s, key)
			m.params[key] = n
		}
		out = append(out, m)
	}
	return out
}

// fields is what one response says of its policies, checked for shape:
// for each policy (in order) its name and q, w, r and t.
type fields struct {
	name       string
	q, w, r, t int64
}

// policyFields parses both RateLimit fields of h and checks that they name
// the same policies in the same order.
func policyFields(t *testing.T, h http.Header) []fields {
	t.Helper()
	policies := members(t, h, "RateLimit-Policy", "q", "w")
	current := members(t, h, "RateLimit", "r", "t")
	require.Len(t, current, len(policies), "RateLimit and RateLimit-Policy list different policies")
	out := make([]fields, len(policies))
	for i, p := range policies {
		require.Equal(t, p.name, current[i].name, "member %d", i)
		out[i] = fields{p.name, p.params["q"], p.params["w"], current[i].params["r"], current[i].params["t"]}
		require.LessOrEqual(t, out[i].r, out[i].q, "%s: r above q", p.name)
	}
	return out
}

// refusal is the default JSON body of a 429.
type refusal struct {
	Error             string `json:"error"`
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	Policy            string `json:"policy"`
	Limit             *int   `json:"limit"`
	Remaining         *int   `json:"remaining"`
	// problem+json members
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func decodeRefusal(t *testing.T, body string) refusal {
	t.Helper()
	var r refusal
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&r), "body %q", body)
	return r
}

// retryAfter returns the Retry-After of h in seconds, checking it is a
// whole positive number.
func retryAfter(t *testing.T, h http.Header) int {
	t.Helper()
	v := h.Get("Retry-After")
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "Retry-After %q", v)
	require.Positive(t, n, "Retry-After %q", v)
	return n
}
