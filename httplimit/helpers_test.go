package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// The helpers of the package's tests. Assertions: testify's require on the
// test's goroutine; a helper that runs on another goroutine (a handler, a
// callback, a goroutine a test starts) never asserts, it records what it saw
// and the test asserts afterwards.

const (
	ms = time.Millisecond
	s  = time.Second
)

// ---- Servers, handlers and requests ----

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

// newBucket returns a TokenBucket of l read on clk (a mock), closed when
// the test ends.
func newBucket(t *testing.T, l keylimit.Limit, clk clock.Clock, opts ...keylimit.Option) *keylimit.TokenBucket[string] {
	t.Helper()
	b, err := keylimit.NewTokenBucket[string](l, append(opts, keylimit.WithClock(clk))...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// bucket returns a policy named name on a token bucket of l read on mock.
func bucket(t *testing.T, name string, l keylimit.Limit, mock *clock.Mock, opts ...keylimit.Option) quota.Policy {
	t.Helper()
	return quota.Policy{Name: name, Limiter: newBucket(t, l, mock, opts...)}
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

// call sends a GET for target with the given header fields (name, value
// pairs) to h, without a network, and returns the response.
func call(h http.Handler, target string, fields ...string) *http.Response {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Set(fields[i], fields[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// request returns a request from peer carrying the header lines given as
// name, value pairs.
func request(peer string, fields ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(fields); i += 2 {
		r.Header.Add(fields[i], fields[i+1])
	}
	return r
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// countAdmitted sends the requests through a middleware keyed by ip with
// a burst of 3 and counts the 200s.
func countAdmitted(t *testing.T, ip httplimit.ClientIP, reqs []*http.Request) int {
	t.Helper()
	limit := limited(t, httplimit.Config{
		Key:      ip.Key,
		Policies: []quota.Policy{bucket(t, "minute", keylimit.PerMinute(3), clock.NewMock())},
	})(&ok{})
	n := 0
	for _, r := range reqs {
		w := httptest.NewRecorder()
		limit.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			n++
		}
	}
	return n
}

// ---- Limiters and what the middleware decides ----

// decisions records what OnDecision sees.
type decisions struct {
	mu  sync.Mutex
	all []quota.Decision
}

func (d *decisions) record(_ *http.Request, dec quota.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = append(d.all, dec)
}

func (d *decisions) list() []quota.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]quota.Decision(nil), d.all...)
}

// last is the latest decision.
func (d *decisions) last() quota.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.all[len(d.all)-1]
}

// scripted is a Limiter that answers Take with the Result it is given and
// reports the Limit it is given: any limiter, not only keylimit's, can
// count for a policy, and whatever it answers makes valid fields.
type scripted struct {
	mu     sync.Mutex
	result keylimit.Result
	limit  keylimit.Limit
}

func (s *scripted) set(r keylimit.Result, l keylimit.Limit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.result, s.limit = r, l
}

func (s *scripted) Take(string, int) keylimit.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}
func (s *scripted) Peek(k string) keylimit.Result { return s.Take(k, 1) }
func (s *scripted) Allow(k string) bool           { return s.Take(k, 1).Allowed }
func (s *scripted) AllowN(k string, n int) bool   { return s.Take(k, n).Allowed }
func (s *scripted) Reset(string)                  {}
func (s *scripted) Limit() keylimit.Limit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// ctxMark is the key of a value a test puts in a request's context, to see
// which context a limiter is asked under.
type ctxMark struct{}

// contextLimiter is a ContextLimiter that records the value under ctxMark
// of each context TakeContext is asked under, and answers as take says, or
// admits if take is nil.
type contextLimiter struct {
	scripted
	take func(ctx context.Context) (keylimit.Result, error)
	mu   sync.Mutex
	seen []any // protected by mu
}

func (l *contextLimiter) TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error) {
	l.mu.Lock()
	l.seen = append(l.seen, ctx.Value(ctxMark{}))
	l.mu.Unlock()
	if l.take != nil {
		return l.take(ctx)
	}
	return keylimit.Result{Allowed: true, Limit: 1, Remaining: 1}, nil
}

// marks returns what TakeContext saw, one value a call.
func (l *contextLimiter) marks() []any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// countingBucket is a TokenBucket that records the methods called on it,
// to count what deciding a request asks of each limiter.
type countingBucket struct {
	*keylimit.TokenBucket[string]
	mu    sync.Mutex
	calls []string // protected by mu
}

func (c *countingBucket) record(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, method)
}

// called returns the methods called so far, in order, and forgets them.
func (c *countingBucket) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

func (c *countingBucket) Allow(k string) bool { c.record("Allow"); return c.TokenBucket.Allow(k) }
func (c *countingBucket) AllowN(k string, n int) bool {
	c.record("AllowN")
	return c.TokenBucket.AllowN(k, n)
}
func (c *countingBucket) Take(k string, n int) keylimit.Result {
	c.record("Take")
	return c.TokenBucket.Take(k, n)
}
func (c *countingBucket) Peek(k string) keylimit.Result {
	c.record("Peek")
	return c.TokenBucket.Peek(k)
}
func (c *countingBucket) Reset(k string) { c.record("Reset"); c.TokenBucket.Reset(k) }
func (c *countingBucket) Admit(k string, n int) (keylimit.Result, keylimit.Admission) {
	c.record("Admit")
	return c.TokenBucket.Admit(k, n)
}
func (c *countingBucket) Refund(k string, a keylimit.Admission) {
	c.record("Refund")
	c.TokenBucket.Refund(k, a)
}

// noLimit is a Limiter that does not report its Limit.
type noLimit struct{ scripted }

func (*noLimit) Limit() {}

// ---- The fields and bodies the middleware sends ----

// member is one policy's member of the RateLimit or RateLimit-Policy field.
type member struct {
	name   string
	params map[string]int64
}

// members parses the field name of h with the strict Structured Fields
// parser (sf_test.go) and checks its shape: a list of Strings, each with
// Integer parameters, none negative; want lists the parameters every member
// must have and no other.
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

// refusal is the default body of a 429, JSON or problem+json.
type refusal struct {
	Error             string `json:"error"`
	RetryAfterSeconds *int64 `json:"retry_after_seconds"`
	Policy            string `json:"policy"`
	Limit             *int   `json:"limit"`
	Remaining         *int   `json:"remaining"`
	// problem+json members
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
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

// step is one request of a step table, sent after the mock clock has moved
// by advance, and everything its answer must say.
type step struct {
	advance time.Duration
	path    string   // appended to the server's URL
	header  []string // header fields beside the table's, name, value pairs
	status  int
	// retryAfter is the Retry-After of a refusal in seconds; 0 means the
	// answer has none (every admission, and a refusal that can never pass).
	retryAfter int
	fields     []fields // RateLimit and RateLimit-Policy, policy by policy
	body       string   // the JSON body of a refusal; "" is not checked
	// legacy is X-RateLimit-Limit, -Remaining and -Reset; nil means the
	// answer has none.
	legacy []string
}

// runSteps sends the steps' requests to url in turn, each with the header
// fields given (name, value pairs), and checks every answer against its step.
func runSteps(t *testing.T, mock *clock.Mock, url string, header []string, steps []step) {
	t.Helper()
	for i, st := range steps {
		mock.Add(st.advance)
		got := get(t, url+st.path, append(slices.Clone(header), st.header...)...)
		require.Equal(t, st.status, got.status, "step %d: status", i)
		require.Equal(t, st.fields, policyFields(t, got.header), "step %d: RateLimit fields", i)
		if st.retryAfter == 0 {
			require.Empty(t, got.header.Values("Retry-After"), "step %d: Retry-After", i)
		} else {
			require.Equal(t, st.retryAfter, retryAfter(t, got.header), "step %d: Retry-After", i)
		}
		if st.body != "" {
			require.JSONEq(t, st.body, got.body, "step %d: body", i)
		}
		legacy := []string{got.header.Get("X-RateLimit-Limit"), got.header.Get("X-RateLimit-Remaining"), got.header.Get("X-RateLimit-Reset")}
		if st.legacy == nil {
			require.Equal(t, []string{"", "", ""}, legacy, "step %d: X-RateLimit-*", i)
		} else {
			require.Equal(t, st.legacy, legacy, "step %d: X-RateLimit-*", i)
		}
	}
}

// ---- Clocks and waiting ----

// autoClock is a mock clock that lets time pass by itself whenever someone
// waits on it: a Timer of d moves the clock d forward at once. With one
// goroutine at a time waiting, a test runs on exact simulated time, at once.
type autoClock struct{ *clock.Mock }

func (c autoClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.Mock.Add(d)
	return t
}

// stoppedClock is a clock whose time never moves: it only tells the time
// (clock.Mock's Set sleeps a millisecond, too slow for a fuzz target).
type stoppedClock struct {
	clock.Clock // nil: any other method panics
	now         time.Time
}

func (c stoppedClock) Now() time.Time                  { return c.now }
func (c stoppedClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

// countingClock is a mock clock that counts the timers made on it, so that
// a test can wait until the goroutines it started are all asleep on the
// clock before it moves the clock.
type countingClock struct {
	*clock.Mock
	timers *atomic.Int32
}

func newCountingClock() countingClock {
	return countingClock{clock.NewMock(), new(atomic.Int32)}
}

func (c countingClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.timers.Add(1)
	return t
}

// asleep waits until n timers have been made on c.
func (c countingClock) asleep(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d goroutines asleep", n), func() bool { return int(c.timers.Load()) >= n })
}

// waitUpTo polls cond in real time until it holds or d has passed, and
// reports whether it held.
func waitUpTo(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// waitFor polls cond in real time until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.True(t, waitUpTo(10*time.Second, cond), "timed out waiting for %s", what)
}

// ---- The partner a Transport talks to ----

// arrival is one request as the partner server saw it.
type arrival struct {
	at     time.Duration // on the mock clock, since the test began
	method string
	body   string
	status int
}

// partner is a server on 127.0.0.1 that answers as its script says (the
// n-th request, from 0, gets the status the script returns) and records
// every request it sees, with the mock time it saw it at.
type partner struct {
	*httptest.Server
	mock *clock.Mock
	t0   time.Time

	mu       sync.Mutex
	arrivals []arrival // protected by mu
}

func newPartner(t *testing.T, mock *clock.Mock, script func(n int, r *http.Request, h http.Header) int) *partner {
	p := &partner{mock: mock, t0: mock.Now()}
	p.Server = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		n := len(p.arrivals)
		status := script(n, r, w.Header())
		p.arrivals = append(p.arrivals, arrival{at: p.mock.Now().Sub(p.t0), method: r.Method, body: string(body), status: status})
		p.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprintf(w, "answer %d\n", n)
	}))
	return p
}

// limitedServer is a partner behind the httplimit middleware, which
// enforces l per client IP on the mock clock. Its arrivals are the
// middleware's decisions, refusals included.
func limitedServer(t *testing.T, mock *clock.Mock, l keylimit.Limit) *partner {
	p := &partner{mock: mock, t0: mock.Now()}
	limit := limited(t, httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{bucket(t, "second", l, mock)},
		OnDecision: func(r *http.Request, d quota.Decision) {
			status := http.StatusOK
			if !d.Result.Allowed {
				status = http.StatusTooManyRequests
			}
			p.mu.Lock()
			p.arrivals = append(p.arrivals, arrival{at: p.mock.Now().Sub(p.t0), method: r.Method, status: status})
			p.mu.Unlock()
		},
	})
	p.Server = serve(t, limit(&ok{}))
	return p
}

func (p *partner) seen() []arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]arrival(nil), p.arrivals...)
}

func (p *partner) count() int { return len(p.seen()) }

// times returns the mock times of the arrivals.
func (p *partner) times() []time.Duration {
	var out []time.Duration
	for _, a := range p.seen() {
		out = append(out, a.at)
	}
	return out
}

// refuseFirst answers the first n requests with status and the given field,
// the rest with 200.
func refuseFirst(n, status int, fields ...string) func(int, *http.Request, http.Header) int {
	return func(i int, _ *http.Request, h http.Header) int {
		if i >= n {
			return http.StatusOK
		}
		for j := 0; j < len(fields); j += 2 {
			h.Set(fields[j], fields[j+1])
		}
		return status
	}
}

// ---- Clients ----

// fetch sends a GET to url with c, reads the answer to its end and closes
// it. It asserts nothing, so that any goroutine may call it.
func fetch(c *http.Client, ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// tally counts answers by status, and the errors of requests that got none,
// from any number of goroutines.
type tally struct {
	mu       sync.Mutex
	byStatus map[int]int
	errs     []error
}

// add records the outcome of one request.
func (c *tally) add(resp *http.Response, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	if c.byStatus == nil {
		c.byStatus = map[int]int{}
	}
	c.byStatus[resp.StatusCode]++
}

// storm sends rounds requests from each of n goroutines through c, and
// counts the answers by status.
func storm(c *http.Client, url string, n, rounds int) *tally {
	var counts tally
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range rounds {
				counts.add(fetch(c, context.Background(), url))
			}
		})
	}
	wg.Wait()
	return &counts
}

// retrying returns a Transport that retries up to 3 times on mock time,
// with a backoff of 100 ms jittered by rnd.
func retrying(mock *clock.Mock, rnd float64, base http.RoundTripper) *httplimit.Transport {
	return &httplimit.Transport{
		Base: base, Clock: autoClock{mock}, Retries: 3,
		Backoff: 100 * ms, Rand: func() float64 { return rnd },
	}
}

// transportError returns err as a *httplimit.TransportError, failing the
// test if it is none.
func transportError(t *testing.T, err error) *httplimit.TransportError {
	t.Helper()
	var te *httplimit.TransportError
	require.ErrorAs(t, err, &te)
	return te
}

type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// recorder is a Base that records the answers it returns, to check that
// the Transport closes those it retries.
type recorder struct {
	mu     sync.Mutex
	bodies []*closeTracker
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := &closeTracker{Reader: bytes.NewReader(data)}
	resp.Body = body
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) closed() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []bool
	for _, b := range r.bodies {
		out = append(out, b.closed.Load())
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type idleCloser struct {
	roundTripFunc
	closed bool
}

func (c *idleCloser) CloseIdleConnections() { c.closed = true }

// ---- Adaptive throttling ----

// seeded returns a source of random numbers in [0, 1), the same for the
// same seed, safe for concurrent use.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// throttleModel is the throttling formula written plainly, for one key:
// counts decayed by e each window, a request rejected with probability
// max(0, (requests − k·accepts) / (requests + 1)).
type throttleModel struct {
	k                 float64
	window            time.Duration
	requests, accepts float64
	at                time.Time
}

func (m *throttleModel) decay(now time.Time) {
	f := math.Exp(-float64(now.Sub(m.at)) / float64(m.window))
	m.requests, m.accepts, m.at = m.requests*f, m.accepts*f, now
}

// admit returns the probability of rejection at now and whether u sends
// the request; one rejected counts at once.
func (m *throttleModel) admit(now time.Time, u float64) (float64, bool) {
	m.decay(now)
	p := max(0, (m.requests-m.k*m.accepts)/(m.requests+1))
	if u < p {
		m.requests++
	}
	return p, u >= p
}

// answered counts one sent at its answer, at now, and its accept.
func (m *throttleModel) answered(now time.Time, accepted bool) {
	m.decay(now)
	m.requests++
	if accepted {
		m.accepts++
	}
}

// expiring is a context whose deadline passes when done is closed, at a
// moment the test chooses.
type expiring struct {
	context.Context
	done chan struct{}
}

func (c *expiring) Done() <-chan struct{} { return c.done }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// chargeReported is a Policy.Charge that charges the cost the handler
// reported, or the whole cost if it reported none.
func chargeReported(o quota.Outcome) int {
	if o.Reported < 0 {
		return o.Cost
	}
	return o.Reported
}
