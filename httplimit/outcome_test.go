package httplimit_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
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
		Policies:   []quota.Policy{{Name: "rows", Limiter: rows, Charge: quota.ChargeReported}},
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
