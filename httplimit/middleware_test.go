package httplimit_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decisions records what OnDecision sees.
type decisions struct {
	mu  sync.Mutex
	all []httplimit.Decision
}

func (d *decisions) record(_ *http.Request, dec httplimit.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all = append(d.all, dec)
}

func (d *decisions) list() []httplimit.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]httplimit.Decision(nil), d.all...)
}

// The three-user scenario: alice, bob and charlie each send 8 rapid
// requests to a bucket of 5 refilling 1 a second: 5 pass, 3 are refused
// with Retry-After 1. 3 s later, each passes 3 more. Every response is
// checked field by field.
func TestThreeUsers(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []httplimit.Policy{bucket(t, "burst", keylimit.PerSecond(1).WithBurst(5), mock)},
		OnDecision: seen.record,
	})(h))
	users := []string{"alice", "bob", "charlie"}

	// fire sends 8 requests as user and checks each answer: the first
	// `pass` are admitted, their RateLimit r counting down from r0 and t
	// counting up from t0; the rest are refused.
	fire := func(user string, pass, r0, t0 int64) {
		t.Helper()
		for i := range int64(8) {
			got := get(t, srv.URL+"/", "X-User", user)
			f := policyFields(t, got.header)
			require.Len(t, f, 1)
			assert.Equal(t, fields{"burst", 5, 5, max(r0-i, 0), min(t0+i, 5)}, f[0], "%s request %d", user, i+1)
			// The fields say what the limiter's Result said.
			d := seen.list()[len(seen.list())-1]
			assert.Equal(t, user, d.Key)
			assert.Equal(t, int64(d.Result.Limit), f[0].q)
			assert.Equal(t, int64(d.Result.Remaining), f[0].r)
			assert.Equal(t, int64(math.Ceil(d.Result.ResetAfter.Seconds())), f[0].t)
			if !d.Result.Allowed {
				assert.Equal(t, int(math.Ceil(d.Result.RetryAfter.Seconds())), retryAfter(t, got.header))
			}
			if i < pass {
				require.Equal(t, http.StatusOK, got.status, "%s request %d", user, i+1)
				assert.Equal(t, "ok", got.body)
				assert.Empty(t, got.header.Get("Retry-After"))
				continue
			}
			require.Equal(t, http.StatusTooManyRequests, got.status, "%s request %d", user, i+1)
			assert.Equal(t, 1, retryAfter(t, got.header))
			assert.Equal(t, "no-store", got.header.Get("Cache-Control"))
			assert.Equal(t, "application/json", got.header.Get("Content-Type"))
			assert.JSONEq(t, `{"error":"rate limit exceeded","retry_after_seconds":1,"policy":"burst","limit":5,"remaining":0}`, got.body)
		}
	}
	for _, u := range users {
		fire(u, 5, 4, 1)
	}
	mock.Add(3 * time.Second)
	for _, u := range users {
		fire(u, 3, 2, 3)
	}
	assert.Equal(t, 3*(5+3), h.count(), "handler calls")

	all := seen.list()
	require.Len(t, all, 3*16)
	admitted := 0
	for i, d := range all {
		assert.Equal(t, users[i/8%3], d.Key)
		assert.Equal(t, "burst", d.Policy)
		assert.Equal(t, 1, d.Cost)
		if d.Result.Allowed {
			admitted++
			assert.Zero(t, d.Result.RetryAfter)
		} else {
			assert.Equal(t, time.Second, d.Result.RetryAfter)
		}
	}
	assert.Equal(t, 3*(5+3), admitted)
}

// Two named policies on one key: "minute" 3/min and "hour" 5/hour. A
// request refused by one takes nothing from the other.
func TestMinuteAndHour(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"),
		Policies: []httplimit.Policy{
			bucket(t, "minute", keylimit.PerMinute(3), mock),
			bucket(t, "hour", keylimit.PerHour(5), mock),
		},
		OnDecision: seen.record,
	})(&ok{}))
	send := func() (reply, []fields) {
		t.Helper()
		got := get(t, srv.URL, "X-Api-Key", "k1")
		return got, policyFields(t, got.header)
	}

	for i := range 3 {
		got, f := send()
		require.Equal(t, http.StatusOK, got.status)
		// t: a minute bucket of 3 refills one every 20 s, an hour
		// bucket of 5 one every 12 min.
		assert.Equal(t, []fields{
			{"minute", 3, 60, int64(2 - i), int64(20 * (i + 1))},
			{"hour", 5, 3600, int64(4 - i), int64(720 * (i + 1))},
		}, f)
	}
	got, f := send()
	require.Equal(t, http.StatusTooManyRequests, got.status)
	assert.Equal(t, 20, retryAfter(t, got.header), "the minute's next token is 20 s away")
	assert.Equal(t, []fields{{"minute", 3, 60, 0, 60}, {"hour", 5, 3600, 2, 2160}}, f, "the refusal took nothing from the hour")
	assert.JSONEq(t, `{"error":"rate limit exceeded","retry_after_seconds":20,"policy":"minute","limit":3,"remaining":0}`, got.body)

	mock.Add(time.Minute)
	for i := range 2 {
		got, f := send()
		require.Equal(t, http.StatusOK, got.status)
		assert.Equal(t, int64(1-i), f[1].r, "hour")
		assert.Equal(t, int64(2-i), f[0].r, "minute")
	}
	got, f = send()
	require.Equal(t, http.StatusTooManyRequests, got.status)
	// The hour's 5 tokens are gone at 0:01; the first comes back at 0:12.
	assert.Equal(t, 11*60, retryAfter(t, got.header))
	assert.Equal(t, []fields{{"minute", 3, 60, 1, 40}, {"hour", 5, 3600, 0, 59 * 60}}, f, "the refusal took nothing from the minute")
	assert.JSONEq(t, `{"error":"rate limit exceeded","retry_after_seconds":660,"policy":"hour","limit":5,"remaining":0}`, got.body)

	var refusedBy []string
	for _, d := range seen.list() {
		if !d.Result.Allowed {
			refusedBy = append(refusedBy, d.Policy)
		}
	}
	assert.Equal(t, []string{"minute", "hour"}, refusedBy)
}

// Tiers: client-1 gets 10/min on /foo and 5/min on /bar, client-2 20/min
// and 10/min, anyone else 2/min on each. Each route has its own middleware,
// with one limiter per tier.
func TestTiers(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	route := func(one, two int) func(http.Handler) http.Handler {
		return limited(t, httplimit.Config{
			Key:      httplimit.Header("X-Client"),
			Policies: []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
			Tier:     func(_ *http.Request, key string) string { return key },
			Tiers: map[string][]httplimit.Policy{
				"client-1": {bucket(t, "minute", keylimit.PerMinute(one), mock)},
				"client-2": {bucket(t, "minute", keylimit.PerMinute(two), mock)},
			},
			OnDecision: seen.record,
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /foo", route(10, 20)(&ok{}))
	mux.Handle("GET /bar", route(5, 10)(&ok{}))
	srv := serve(t, mux)

	want := map[string]map[string]int{
		"client-1": {"/foo": 10, "/bar": 5},
		"client-2": {"/foo": 20, "/bar": 10},
		"client-3": {"/foo": 2, "/bar": 2},
	}
	for client, routes := range want {
		for path, quota := range routes {
			passed := 0
			for range 25 {
				got := get(t, srv.URL+path, "X-Client", client)
				if got.status == http.StatusOK {
					passed++
				}
				f := policyFields(t, got.header)
				assert.Equal(t, int64(quota), f[0].q, "%s %s", client, path)
			}
			assert.Equal(t, quota, passed, "%s %s", client, path)
		}
	}
	tiers := map[string]string{}
	for _, d := range seen.list() {
		tiers[d.Key] = d.Tier
	}
	assert.Equal(t, map[string]string{"client-1": "client-1", "client-2": "client-2", "client-3": ""}, tiers)
}

// An expensive endpoint costs 5 of a quota of 12; a cheap one 1. A request
// above the quota can never pass and is refused without Retry-After.
func TestCost(t *testing.T) {
	mock := clock.NewMock()
	limit := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(12), mock)},
		Cost: func(r *http.Request) int {
			switch r.URL.Path {
			case "/expensive":
				return 5
			case "/huge":
				return 13
			case "/free":
				return 0
			}
			return 1
		},
	})
	srv := serve(t, limit(&ok{}))
	status := func(path string) (int, int64) {
		got := get(t, srv.URL+path, "X-User", "alice")
		return got.status, policyFields(t, got.header)[0].r
	}

	for _, want := range []struct {
		path   string
		status int
		r      int64
	}{
		{"/expensive", 200, 7},
		{"/expensive", 200, 2},
		{"/expensive", 429, 2}, // 2 left: not enough for 5, and none taken
		{"/cheap", 200, 1},
		{"/cheap", 200, 0},
		{"/cheap", 429, 0},
		{"/free", 200, 0}, // costs nothing, so passes even now
	} {
		s, r := status(want.path)
		assert.Equal(t, want.status, s, want.path)
		assert.Equal(t, want.r, r, want.path)
	}

	mock.Add(time.Minute)
	got := get(t, srv.URL+"/huge", "X-User", "alice")
	require.Equal(t, http.StatusTooManyRequests, got.status)
	assert.Empty(t, got.header.Get("Retry-After"), "a request that can never pass has no time to retry at")
	assert.Equal(t, int64(12), policyFields(t, got.header)[0].r, "nothing was taken")
	body := decodeRefusal(t, got.body)
	assert.Nil(t, body.RetryAfterSeconds)
	assert.Equal(t, `the request costs 13, more than policy "minute" admits at once (12): it can never pass`, body.Error)

	// The cost is charged in the refused case's Retry-After too: 5 tokens
	// of a 12/min bucket come back 5 × 5 s after the bucket is empty.
	for range 2 {
		get(t, srv.URL+"/expensive", "X-User", "bob")
	}
	get(t, srv.URL+"/cheap", "X-User", "bob")
	get(t, srv.URL+"/cheap", "X-User", "bob")
	got = get(t, srv.URL+"/expensive", "X-User", "bob")
	require.Equal(t, http.StatusTooManyRequests, got.status)
	assert.Equal(t, 25, retryAfter(t, got.header))
}

// A skipped request passes untouched: no key, no count, no fields, no
// decision.
func TestSkip(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(1), mock)},
		Skip:       func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		OnDecision: seen.record,
	})
	srv := serve(t, limit(&ok{}))
	for range 5 {
		got := get(t, srv.URL+"/healthz") // no X-User: not even keyed
		assert.Equal(t, http.StatusOK, got.status)
		assert.Empty(t, got.header.Values("RateLimit"))
		assert.Empty(t, got.header.Values("RateLimit-Policy"))
	}
	assert.Empty(t, seen.list())
	assert.Equal(t, http.StatusOK, get(t, srv.URL+"/api", "X-User", "u").status)
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv.URL+"/api", "X-User", "u").status)
	assert.Equal(t, http.StatusOK, get(t, srv.URL+"/healthz", "X-User", "u").status)
	assert.Len(t, seen.list(), 2)
}

// Dry run: every request passes, the fields tell the truth, and OnDecision
// sees the refusals that enforcement would make.
func TestDryRun(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
		DryRun:     true,
		OnDecision: seen.record,
	})
	srv := serve(t, limit(h))
	var rs []int64
	for range 5 {
		got := get(t, srv.URL, "X-User", "u")
		require.Equal(t, http.StatusOK, got.status)
		assert.Empty(t, got.header.Get("Retry-After"))
		assert.Empty(t, got.header.Get("Cache-Control"))
		rs = append(rs, policyFields(t, got.header)[0].r)
	}
	assert.Equal(t, []int64{1, 0, 0, 0, 0}, rs)
	assert.Equal(t, 5, h.count())
	var allowed []bool
	for _, d := range seen.list() {
		allowed = append(allowed, d.Result.Allowed)
		if !d.Result.Allowed {
			assert.Equal(t, 30*time.Second, d.Result.RetryAfter)
		}
	}
	assert.Equal(t, []bool{true, true, false, false, false}, allowed)

	// A refusal in dry run counts nothing: after 30 s one token is back.
	mock.Add(30 * time.Second)
	assert.Equal(t, int64(0), policyFields(t, get(t, srv.URL, "X-User", "u").header)[0].r)
	assert.True(t, seen.list()[5].Result.Allowed)
}

// A request that cannot be keyed is answered without a count, never
// counted under a shared key: 400 when the request lacks the key, 500 when
// the server is misconfigured, or as Config.Error says.
func TestKeyErrors(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	policies := func() []httplimit.Policy {
		return []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(100), mock)}
	}
	byHeader := limited(t, httplimit.Config{Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record})
	byRoute := limited(t, httplimit.Config{Key: httplimit.Route, Policies: policies(), OnDecision: seen.record})
	empty := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "", nil },
		Policies: policies(), OnDecision: seen.record,
	})
	negative := limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record,
		Cost: func(*http.Request) int { return -1 },
	})
	custom := limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"), Policies: policies(), OnDecision: seen.record,
		Error: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "who are you? "+err.Error(), http.StatusUnauthorized)
		},
	})
	mux := http.NewServeMux()
	mux.Handle("/header", byHeader(h))
	mux.Handle("/empty", empty(h))
	mux.Handle("/negative", negative(h))
	mux.Handle("/custom", custom(h))
	srv := serve(t, mux)
	// Route around a ServeMux, rather than inside it, finds no pattern.
	inner := http.NewServeMux()
	inner.Handle("GET /route/{id}", h)
	srvRoute := serve(t, byRoute(inner))

	got := get(t, srv.URL+"/header")
	assert.Equal(t, http.StatusBadRequest, got.status)
	assert.Equal(t, "application/json", got.header.Get("Content-Type"))
	assert.JSONEq(t, `{"error":"httplimit: the request carries no key: no X-Api-Key header"}`, got.body)
	assert.Empty(t, got.header.Values("RateLimit"))

	got = get(t, srv.URL+"/header", "X-Api-Key", "", "Accept", "application/problem+json")
	assert.Equal(t, http.StatusBadRequest, got.status)
	assert.Equal(t, "application/problem+json", got.header.Get("Content-Type"))
	assert.JSONEq(t, `{"title":"Bad Request","status":400,"detail":"httplimit: the request carries no key: no X-Api-Key header"}`, got.body)

	for _, url := range []string{srvRoute.URL + "/route/1", srv.URL + "/empty", srv.URL + "/negative"} {
		got = get(t, url, "X-Api-Key", "k")
		assert.Equal(t, http.StatusInternalServerError, got.status, url)
		assert.JSONEq(t, `{"error":"httplimit: the server could not apply its rate limit to this request"}`, got.body, url)
	}

	got = get(t, srv.URL+"/custom")
	assert.Equal(t, http.StatusUnauthorized, got.status)
	assert.Equal(t, "who are you? httplimit: the request carries no key: no X-Api-Key header\n", got.body)

	assert.Zero(t, h.count(), "no handler ran")
	assert.Empty(t, seen.list(), "nothing was decided")
}

// The middleware wraps the handler a ServeMux found, which knows its
// pattern: Route keys by it, and Join keys by client and route.
func TestRouteAndJoin(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Join(httplimit.Header("X-User"), httplimit.Route),
		Policies:   []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
		OnDecision: seen.record,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", limit(&ok{}))
	mux.Handle("POST /items", limit(&ok{}))
	srv := serve(t, mux)

	statuses := func(method, path, user string) []int {
		var out []int
		for range 3 {
			req, err := http.NewRequest(method, srv.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("X-User", user)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			out = append(out, resp.StatusCode)
		}
		return out
	}
	limitedOut := []int{200, 200, 429}
	assert.Equal(t, limitedOut, statuses("GET", "/items/1", "a|b"))
	assert.Equal(t, []int{429, 429, 429}, statuses("GET", "/items/2", "a|b"), "one route, whatever its path values")
	assert.Equal(t, limitedOut, statuses("POST", "/items", "a|b"))
	assert.Equal(t, limitedOut, statuses("GET", "/items/1", "a"))
	keys := map[string]bool{}
	for _, d := range seen.list() {
		keys[d.Key] = true
	}
	assert.Equal(t, map[string]bool{`a\|b|GET /items/{id}`: true, `a\|b|POST /items`: true, `a|GET /items/{id}`: true}, keys)
}

// A client that asks for problem+json gets an RFC 9457 problem.
func TestProblemJSON(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "second", keylimit.PerSecond(1), mock)},
	})(&ok{}))
	get(t, srv.URL, "X-User", "u")
	for _, accept := range []string{"application/problem+json", "application/json, application/problem+json;q=0.9", "text/html,APPLICATION/PROBLEM+JSON"} {
		got := get(t, srv.URL, "X-User", "u", "Accept", accept)
		require.Equal(t, http.StatusTooManyRequests, got.status)
		assert.Equal(t, "application/problem+json", got.header.Get("Content-Type"), accept)
		assert.JSONEq(t, `{"title":"Too Many Requests","status":429,"detail":"rate limit exceeded","retry_after_seconds":1,"policy":"second","limit":1,"remaining":0}`, got.body)
	}
	for _, accept := range []string{"application/json", "application/problem+json;q=0", "application/problem+json; q=0.000", "application/problem+xml"} {
		got := get(t, srv.URL, "X-User", "u", "Accept", accept)
		assert.Equal(t, "application/json", got.header.Get("Content-Type"), accept)
	}
}

// Config.Deny answers refusals its own way, with the fields already set.
func TestCustomDeny(t *testing.T) {
	mock := clock.NewMock()
	var denied []httplimit.Decision
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "second", keylimit.PerSecond(2), mock)},
		Deny: func(w http.ResponseWriter, r *http.Request, d httplimit.Decision) {
			denied = append(denied, d)
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
			assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte("slow down, " + d.Key))
		},
	})(&ok{}))
	for range 2 {
		get(t, srv.URL, "X-User", "carol")
	}
	got := get(t, srv.URL, "X-User", "carol")
	assert.Equal(t, http.StatusTeapot, got.status)
	assert.Equal(t, "slow down, carol", got.body)
	assert.Equal(t, []fields{{"second", 2, 1, 0, 1}}, policyFields(t, got.header))
	require.Len(t, denied, 1)
	assert.Equal(t, httplimit.Decision{Key: "carol", Policy: "second", Cost: 1, Result: keylimit.Result{
		Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: time.Second,
	}}, denied[0])
}

// A limiter at its key cap refuses keys it cannot track: that is 503, not
// 429, with the limiter's hint as Retry-After.
func TestUntrackedKey(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []httplimit.Policy{bucket(t, "minute", keylimit.PerMinute(10), mock, keylimit.WithMaxKeys(1), keylimit.WithEvictionInterval(0))},
		OnDecision: seen.record,
	})(&ok{}))
	assert.Equal(t, http.StatusOK, get(t, srv.URL, "X-User", "alice").status)
	got := get(t, srv.URL, "X-User", "bob")
	assert.Equal(t, http.StatusServiceUnavailable, got.status)
	assert.Equal(t, "no-store", got.header.Get("Cache-Control"))
	assert.Equal(t, 6, retryAfter(t, got.header), "alice's bucket is full again, and can go, in 6 s")
	body := decodeRefusal(t, got.body)
	assert.Equal(t, "the rate limiter is tracking as many clients as it can: try again later", body.Error)
	d := seen.list()[1]
	assert.True(t, d.Result.Untracked)
	assert.False(t, d.Result.Allowed)
}

// LegacyFields adds X-RateLimit-* for the binding policy, Reset in
// seconds until the quota is whole, rounded up.
func TestLegacyFields(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []httplimit.Policy{
			bucket(t, "second", keylimit.PerSecond(5), mock), // a token every 200 ms
			bucket(t, "minute", keylimit.PerMinute(5), mock), // a token every 12 s
		},
		LegacyFields: true,
	})(&ok{}))
	for i, want := range []struct {
		status          int
		policy          string
		limit, rem, rst string
	}{
		{200, "second", "5", "4", "1"}, // a tie at 4: the first policy binds
		{200, "second", "5", "3", "1"},
		{200, "minute", "5", "2", "35"}, // a second later: the second has 4, the minute 2
		{200, "minute", "5", "1", "47"},
		{200, "minute", "5", "0", "59"},
		{429, "minute", "5", "0", "59"},
	} {
		if i == 2 {
			mock.Add(time.Second)
		}
		got := get(t, srv.URL, "X-User", "u")
		require.Equal(t, want.status, got.status, "request %d", i+1)
		assert.Equal(t, []string{want.limit, want.rem, want.rst},
			[]string{got.header.Get("X-RateLimit-Limit"), got.header.Get("X-RateLimit-Remaining"), got.header.Get("X-RateLimit-Reset")},
			"request %d", i+1)
		f := policyFields(t, got.header)
		for _, p := range f {
			if p.name == want.policy {
				assert.Equal(t, want.rem, strconv.FormatInt(p.r, 10), "the legacy fields are the binding policy's")
				assert.Equal(t, want.rst, strconv.FormatInt(p.t, 10), "the legacy fields are the binding policy's")
			}
		}
		if want.status == 429 {
			assert.Equal(t, 11, retryAfter(t, got.header), "the minute's next token comes at 0:12")
			assert.JSONEq(t, `{"error":"rate limit exceeded","retry_after_seconds":11,"policy":"minute","limit":5,"remaining":0}`, got.body)
		}
	}
}

// With several policies and a cost, the binding policy of a refusal is the
// first that cannot afford the cost (where keylimit.All stops), not merely
// the one with the least left; and a cost above any policy's quota can
// never pass, even when an earlier policy only lacks tokens now.
func TestCostAcrossPolicies(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []httplimit.Policy{
			bucket(t, "ten", keylimit.PerMinute(10), mock), // a token every 6 s
			bucket(t, "seven", keylimit.PerMinute(7), mock),
		},
		Cost: func(r *http.Request) int {
			n, err := strconv.Atoi(r.Header.Get("X-Cost"))
			require.NoError(t, err)
			return n
		},
	})(&ok{}))
	send := func(cost string) reply { return get(t, srv.URL, "X-User", "u", "X-Cost", cost) }

	require.Equal(t, http.StatusOK, send("6").status) // ten: 4 left, seven: 1
	got := send("5")
	require.Equal(t, http.StatusTooManyRequests, got.status)
	assert.Equal(t, 6, retryAfter(t, got.header), "ten lacks one token, 6 s away")
	assert.JSONEq(t, `{"error":"rate limit exceeded","retry_after_seconds":6,"policy":"ten","limit":10,"remaining":4}`, got.body)

	mock.Add(time.Hour)
	require.Equal(t, http.StatusOK, send("7").status) // ten: 3 left, seven: 0
	got = send("8")                                   // ten refuses for now; seven never can
	require.Equal(t, http.StatusTooManyRequests, got.status)
	assert.Empty(t, got.header.Get("Retry-After"))
	assert.JSONEq(t, `{"error":"the request costs 8, more than policy \"seven\" admits at once (7): it can never pass","policy":"seven","limit":7,"remaining":0}`, got.body)
}

// Many goroutines on a few keys, on a frozen clock: each key admits exactly
// its burst, no more, no less, and OnDecision sees every decision once.
func TestConcurrentRequestsCountExactly(t *testing.T) {
	const (
		keys       = 4
		burst      = 100
		goroutines = 32
		perG       = 50 // 1600 requests, 400 a key
	)
	mock := clock.NewMock()
	var mu sync.Mutex
	admittedBy := map[string]int{}
	decided := 0
	h := &ok{}
	limit := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []httplimit.Policy{bucket(t, "burst", keylimit.PerHour(burst), mock)},
		OnDecision: func(_ *http.Request, d httplimit.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decided++
			if d.Result.Allowed {
				admittedBy[d.Key]++
			}
		},
	})(h)
	statuses := make([]map[int]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		statuses[g] = map[int]int{}
		wg.Go(func() {
			for i := range perG {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-User", strconv.Itoa((g+i)%keys))
				w := httptest.NewRecorder()
				limit.ServeHTTP(w, r)
				statuses[g][w.Code]++
			}
		})
	}
	wg.Wait()
	total := map[int]int{}
	for _, s := range statuses {
		for code, n := range s {
			total[code] += n
		}
	}
	assert.Equal(t, map[int]int{200: keys * burst, 429: goroutines*perG - keys*burst}, total)
	assert.Equal(t, map[string]int{"0": burst, "1": burst, "2": burst, "3": burst}, admittedBy)
	assert.Equal(t, goroutines*perG, decided)
	assert.Equal(t, keys*burst, h.count())
}

// The same over real connections: 20 clients at once, one key.
func TestConcurrentRequestsOverTheWire(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []httplimit.Policy{bucket(t, "burst", keylimit.PerHour(37), mock)},
	})(&ok{}))
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 10 {
				resp, err := http.Get(srv.URL)
				if !assert.NoError(t, err) {
					return
				}
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 37, 429: 200 - 37}, codes)
}

// The minute and the hour as windows: a FixedWindow of 3 a minute and a
// SlidingWindow of 5 an hour. w is each one's Period, t the time until its
// quota is whole (the fixed window's end; the sliding window's newest
// admission leaving it), and a request refused by one takes nothing from
// the other (both give back through Refund).
func TestMinuteAndHourWindows(t *testing.T) {
	mock := clock.NewMock() // at the Unix epoch: a minute window starts
	minute, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(3), keylimit.WithClock(mock))
	require.NoError(t, err)
	hour, err := keylimit.NewSlidingWindow[string](keylimit.PerHour(5), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { minute.Close(); hour.Close() })
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-Api-Key"),
		Policies: []httplimit.Policy{{Name: "minute", Limiter: minute}, {Name: "hour", Limiter: hour}},
	})(&ok{}))
	mock.Add(10 * time.Second)
	for i, want := range []struct {
		status     int
		retryAfter int
		minute     fields
		hour       fields
	}{
		{200, 0, fields{"minute", 3, 60, 2, 50}, fields{"hour", 5, 3600, 4, 3600}},
		{200, 0, fields{"minute", 3, 60, 1, 50}, fields{"hour", 5, 3600, 3, 3600}},
		{200, 0, fields{"minute", 3, 60, 0, 50}, fields{"hour", 5, 3600, 2, 3600}},
		{429, 50, fields{"minute", 3, 60, 0, 50}, fields{"hour", 5, 3600, 2, 3600}}, // the window ends at 1:00
		// 1:00, a new minute window:
		{200, 0, fields{"minute", 3, 60, 2, 60}, fields{"hour", 5, 3600, 1, 3600}},
		{200, 0, fields{"minute", 3, 60, 1, 60}, fields{"hour", 5, 3600, 0, 3600}},
		// the first of the hour's 5 leaves its window at 1:00:10
		{429, 3550, fields{"minute", 3, 60, 1, 60}, fields{"hour", 5, 3600, 0, 3600}},
	} {
		if i == 4 {
			mock.Add(50 * time.Second)
		}
		got := get(t, srv.URL, "X-Api-Key", "k")
		require.Equal(t, want.status, got.status, "request %d", i+1)
		assert.Equal(t, []fields{want.minute, want.hour}, policyFields(t, got.header), "request %d", i+1)
		if want.status == http.StatusTooManyRequests {
			assert.Equal(t, want.retryAfter, retryAfter(t, got.header), "request %d", i+1)
		}
	}
}

// A SlidingCounter counts for a policy like any limiter: its w is its
// Period.
func TestSlidingCounterPolicy(t *testing.T) {
	mock := clock.NewMock()
	counter, err := keylimit.NewSlidingCounter[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { counter.Close() })
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-Api-Key"),
		Policies: []httplimit.Policy{{Name: "minute", Limiter: counter}},
	})(&ok{}))
	var statuses []int
	for range 3 {
		got := get(t, srv.URL, "X-Api-Key", "k")
		statuses = append(statuses, got.status)
		f := policyFields(t, got.header)
		assert.Equal(t, int64(2), f[0].q)
		assert.Equal(t, int64(60), f[0].w)
	}
	assert.Equal(t, []int{200, 200, 429}, statuses)
}
