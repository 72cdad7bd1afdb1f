package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
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

// failures is a Policy.Charge that charges 401s only.
func failures(o quota.Outcome) int {
	if o.Status == http.StatusUnauthorized {
		return o.Cost
	}
	return 0
}

// newSliding returns a SlidingWindow of l read on mock, closed when the
// test ends.
func newSliding(t *testing.T, l keylimit.Limit, mock *clock.Mock) *keylimit.SlidingWindow[string] {
	t.Helper()
	w, err := keylimit.NewSlidingWindow[string](l, keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	return w
}

// post sends a login form from (X-Forwarded-For) to url, and returns the
// status, or -1 if the request failed: it runs on goroutines, and asserts
// nothing.
func post(url_, from, user, password string) int {
	form := url.Values{"user": {user}, "password": {password}}
	req, err := http.NewRequest(http.MethodPost, url_, strings.NewReader(form.Encode()))
	if err != nil {
		return -1
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", from)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue 28's seed scenario over real connections, counted: 5 failures per
// 15 minutes per account and per IP, successes free. 100 concurrent wrong
// passwords for alice from 10 IPs: exactly 5 reach the handler and fail
// (401), the 95 others are refused (429), and the IPs are charged the 5
// failures between them, not the refusals. 40 right passwords for carol,
// one after another from her own IP, all pass and cost nothing: carol's
// account and her IP are where they were (one at a time: a success in
// flight holds its unit until it ends, so 40 at once would find the 5
// held). Alice stays locked with the right password, from carol's IP
// too, until the window moves on.
func TestLoginLockoutCounts(t *testing.T) {
	mock := clock.NewMock()
	accounts := newSliding(t, keylimit.Per(5, 15*time.Minute), mock)
	ips := newSliding(t, keylimit.Per(5, 15*time.Minute), mock)
	byAccount := limited(t, httplimit.Config{
		Key:      func(r *http.Request) (string, error) { return r.PostFormValue("user"), nil },
		Policies: []quota.Policy{{Name: "account", Limiter: accounts, Charge: failures}},
	})
	ip := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Header: "X-Forwarded-For"}
	byIP := limited(t, httplimit.Config{Key: ip.Key, Policies: []quota.Policy{{Name: "ip", Limiter: ips, Charge: failures}}})
	var mu sync.Mutex
	reached := map[string]int{}
	srv := serve(t, byIP(byAccount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached[r.PostFormValue("user")]++
		mu.Unlock()
		if r.PostFormValue("password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))))
	from := func(i int) string { return fmt.Sprintf("203.0.113.%d", i%10) }

	attack := func(n int, user, password string) map[int]int {
		var wg sync.WaitGroup
		got := make(chan int, n)
		for i := range n {
			wg.Go(func() { got <- post(srv.URL, from(i), user, password) })
		}
		wg.Wait()
		close(got)
		count := map[int]int{}
		for s := range got {
			count[s]++
		}
		return count
	}
	const home = "198.51.100.2"
	logins := func(n int, user string) map[int]int {
		count := map[int]int{}
		for range n {
			count[post(srv.URL, home, user, "right")]++
		}
		return count
	}
	ipsCharged := func() int {
		n := 0
		for i := range 10 {
			n += 5 - ips.Peek(from(i)).Remaining
		}
		return n
	}

	guesses := attack(100, "alice", "guess")
	require.Equal(t, map[int]int{401: 5, 429: 95}, guesses)
	require.Equal(t, 5, reached["alice"], "guesses that reached the handler")
	require.Equal(t, 0, accounts.Peek("alice").Remaining)
	require.Equal(t, 5, ipsCharged(), "the IPs are charged the 5 failures, not the 95 refusals")

	carol := logins(40, "carol")
	require.Equal(t, map[int]int{200: 40}, carol, "successes are free: none is refused")
	require.Equal(t, 40, reached["carol"])
	require.Equal(t, 5, accounts.Peek("carol").Remaining, "carol's 40 logins cost her nothing")
	require.Equal(t, 5, ips.Peek(home).Remaining, "nor her IP")
	require.Equal(t, 5, ipsCharged(), "the attackers' IPs are as they were")

	require.Equal(t, map[int]int{429: 1}, logins(1, "alice"), "locked: the right password too")
	t.Logf("alice: %v of 100 concurrent guesses from 10 IPs (IPs charged %d); carol: %v of 40 logins", guesses, ipsCharged(), carol)
	mock.Add(15 * time.Minute)
	require.Equal(t, map[int]int{200: 1}, logins(1, "alice"), "unlocked once the failures left the window")
}

// A handler reports its cost by a response header (Config.CostHeader) or
// by quota.ReportCost with its request's context: a request admitted with
// the most it may cost (10) is charged that, and the header never reaches
// the client. A header that is not a number counts for nothing (the whole
// cost is charged); the handler's writer still flushes.
func TestChargeReportedCostHTTP(t *testing.T) {
	mock := clock.NewMock()
	rows := newBucket(t, keylimit.PerHour(100), mock)
	h := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-API-Key"),
		Cost:       func(*http.Request) int { return 10 },
		Policies:   []quota.Policy{{Name: "rows", Limiter: rows, Charge: chargeReported}},
		CostHeader: "X-Rows",
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch v := r.URL.Query().Get("rows"); {
		case strings.HasPrefix(v, "ctx"):
			quota.ReportCost(r.Context(), len(v)-3) // ctx + one x a row
		case v != "":
			w.Header().Set("X-Rows", v)
		}
		require.NoError(t, http.NewResponseController(w).Flush())
		w.Write([]byte("rows"))
	}))
	for i, step := range []struct {
		rows      string
		remaining int
	}{
		{"3", 97},
		{"0", 97},
		{"ctxxx", 95},
		{"", 85},    // nothing reported: the whole cost
		{"3x", 75},  // not a number: the whole cost
		{"-1", 65},  // not a number
		{"999", 55}, // above the cost admitted: the cost
	} {
		resp := call(h, "/?rows="+step.rows, "X-API-Key", "k")
		require.Equal(t, http.StatusOK, resp.StatusCode, "step %d", i)
		require.Empty(t, resp.Header.Values("X-Rows"), "step %d: the cost header is the middleware's", i)
		require.Equal(t, step.remaining, rows.Peek("k").Remaining, "step %d", i)
	}
}

// The Outcome a policy is asked to charge: the status the handler wrote
// (200 if none), or for a handler that panicked, Panicked and 500 if it
// wrote nothing; a request refused by another policy of its tier is
// charged nothing and asks no Charge.
func TestChargeOutcomes(t *testing.T) {
	mock := clock.NewMock()
	var mu sync.Mutex
	var seen []quota.Outcome
	record := func(o quota.Outcome) int {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, o)
		return 0
	}
	charged := newBucket(t, keylimit.PerHour(10), mock)
	gate := newBucket(t, keylimit.PerHour(3), mock)
	h := limited(t, httplimit.Config{
		Key: httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{
			{Name: "charged", Limiter: charged, Charge: record},
			{Name: "gate", Limiter: gate},
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
		case "/panic":
			panic(http.ErrAbortHandler)
		}
	}))
	call(h, "/teapot", "X-API-Key", "k")
	call(h, "/", "X-API-Key", "k")
	func() {
		defer func() { require.Equal(t, http.ErrAbortHandler, recover()) }()
		call(h, "/panic", "X-API-Key", "k")
	}()
	resp := call(h, "/", "X-API-Key", "k")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "gate's 3 are used")
	require.Equal(t, []quota.Outcome{
		{Status: 418, Cost: 1, Reported: -1},
		{Status: 200, Cost: 1, Reported: -1},
		{Status: 500, Cost: 1, Reported: -1, Panicked: true},
	}, seen)
	require.Equal(t, 10, charged.Peek("k").Remaining, "all free, and the refusal took nothing")
}

// Issue 37.6: a refusal caused only by the cost of requests still in
// flight says so, with a short Retry-After, not the window's end. 5
// failed logins per 15 minutes per account, successes free, on a fixed
// window: 50 concurrent right logins for one account, the 5 admitted held
// in the handler until the 45 others are answered, get 45 refusals that
// each say in flight, with Retry-After 1 and t=1 (it was 900 and t=900,
// and a client that obeys waited 15 minutes); and so do 50 more whose
// handlers end as they will. Failures stay exactly bounded: 64 concurrent
// wrong passwords in each of three windows reach the handler exactly 5
// times (their refusals, while the 5 are in flight, say so too), and once
// the 5 are charged a refusal says the window's end, 900 seconds.
func TestChargeByOutcomeInFlightRefusal(t *testing.T) {
	mock := clock.NewMock()
	accounts, err := keylimit.NewFixedWindow[string](keylimit.Per(5, 15*time.Minute), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { accounts.Close() })
	var gate atomic.Pointer[chan struct{}] // nil: handlers do not wait
	var reached atomic.Int64
	h := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{{Name: "failures", Limiter: accounts, Charge: failures}},
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if g := gate.Load(); g != nil {
			<-*g
		} else {
			time.Sleep(5 * time.Millisecond) // checking the password, a while
		}
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	// logins sends n logins for alice at once and returns their
	// responses; held, the admitted ones wait in the handler until the n-5
	// others are answered.
	logins := func(n int, password string, held bool) []*http.Response {
		t.Helper()
		g := make(chan struct{})
		if held {
			gate.Store(&g)
		} else {
			gate.Store(nil)
		}
		got := make(chan *http.Response, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { got <- call(h, "/login", "X-User", "alice", "X-Password", password) })
		}
		var resps []*http.Response
		if held {
			deadlock := time.After(time.Minute) // more than 5 admitted would block them
			for len(resps) < n-5 {
				select {
				case r := <-got:
					resps = append(resps, r)
				case <-deadlock:
					t.Fatalf("%d of %d answered while 5 are held", len(resps), n)
				}
			}
		}
		close(g)
		wg.Wait()
		close(got)
		for r := range got {
			resps = append(resps, r)
		}
		return resps
	}
	statuses := func(resps []*http.Response) map[int]int {
		count := map[int]int{}
		for _, r := range resps {
			count[r.StatusCode]++
		}
		return count
	}
	// inFlight checks that every refusal says it is held by requests in
	// flight, for 1 second.
	inFlight := func(what string, resps []*http.Response) {
		t.Helper()
		for _, r := range resps {
			if r.StatusCode != http.StatusTooManyRequests {
				continue
			}
			require.Equal(t, "1", r.Header.Get("Retry-After"), "%s: Retry-After", what)
			require.Equal(t, `"failures";r=0;t=1`, r.Header.Get("RateLimit"), what)
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			require.Contains(t, string(body), "in flight", what)
		}
	}

	resps := logins(50, "right", true)
	require.Equal(t, map[int]int{200: 5, 429: 45}, statuses(resps), "held right logins")
	inFlight("held right logins", resps)
	require.Equal(t, 5, accounts.Peek("alice").Remaining, "successes are free")

	// Over real connections, as a client sees it, the handlers ending as
	// they will: every refusal is one of a quota held, none of one spent.
	srv := serve(t, h)
	gate.Store(nil)
	var wg sync.WaitGroup
	got := make(chan *http.Response, 50)
	for range 50 {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", nil)
			if err != nil {
				panic(err)
			}
			req.Header.Set("X-User", "alice")
			req.Header.Set("X-Password", "right")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				panic(err)
			}
			got <- resp
		})
	}
	wg.Wait()
	close(got)
	resps = resps[:0]
	for r := range got {
		defer r.Body.Close()
		resps = append(resps, r)
	}
	require.Equal(t, 50, statuses(resps)[200]+statuses(resps)[429])
	inFlight("right logins over connections", resps)
	require.Equal(t, 5, accounts.Peek("alice").Remaining, "successes are free")
	t.Logf("50 right logins over connections, ending as they will: %v", statuses(resps))

	for window := range 3 {
		reached.Store(0)
		resps = logins(64, "wrong", true)
		require.Equal(t, map[int]int{401: 5, 429: 59}, statuses(resps), "window %d", window)
		require.Equal(t, int64(5), reached.Load(), "window %d: failures that reached the handler", window)
		inFlight("wrong passwords held", resps)
		require.Equal(t, 0, accounts.Peek("alice").Remaining, "window %d: 5 failures charged", window)

		spent := call(h, "/login", "X-User", "alice", "X-Password", "right")
		require.Equal(t, http.StatusTooManyRequests, spent.StatusCode)
		require.Equal(t, "900", spent.Header.Get("Retry-After"), "spent by failures: the window's end")
		require.Equal(t, `"failures";r=0;t=900`, spent.Header.Get("RateLimit"))
		body, err := io.ReadAll(spent.Body)
		require.NoError(t, err)
		require.NotContains(t, string(body), "in flight")
		mock.Add(15 * time.Minute)
	}
}
