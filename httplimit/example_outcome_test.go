package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

// Brute-force protection: at most 5 failed logins per 15 minutes per
// account, and per client IP; a successful login is free. Each policy
// charges a request by its outcome: admitted first, it is given back
// unless the login failed (401). A locked account is answered 429 with
// Retry-After, whatever the password, until its failures leave the
// window; so is an IP that failed too often, whatever the account. The
// server is real, on 127.0.0.1, behind a proxy that sets
// X-Forwarded-For; the mock clock makes the numbers exact.
func ExampleNew_charge() {
	mock := clock.NewMock()
	failuresOf := func(name string) quota.Policy {
		lim, err := keylimit.NewSlidingWindow[string](keylimit.Per(5, 15*time.Minute), keylimit.WithClock(mock))
		if err != nil {
			panic(err)
		}
		return quota.Policy{Name: name, Limiter: lim, Charge: func(o quota.Outcome) int {
			if o.Status == http.StatusUnauthorized {
				return o.Cost // a failure counts
			}
			return 0 // anything else is given back
		}}
	}
	byAccount, err := httplimit.New(httplimit.Config{
		Key: func(r *http.Request) (string, error) {
			if u := r.PostFormValue("user"); u != "" {
				return u, nil
			}
			return "", quota.ErrNoKey
		},
		Policies: []quota.Policy{failuresOf("account")},
	})
	if err != nil {
		panic(err)
	}
	ip := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Header: "X-Forwarded-For"}
	byIP, err := httplimit.New(httplimit.Config{Key: ip.Key, Policies: []quota.Policy{failuresOf("ip")}})
	if err != nil {
		panic(err)
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "right" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "welcome")
	})
	srv := httptest.NewServer(byIP(byAccount(login)))
	defer srv.Close()

	try := func(from, user, password string) {
		form := url.Values{"user": {user}, "password": {password}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", from)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		fmt.Printf("%s %s/%s: %d", from, user, password, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			var problem struct {
				Violated []string `json:"violated-policies"`
			}
			json.NewDecoder(resp.Body).Decode(&problem)
			fmt.Printf(" Retry-After: %s, locked by %v", resp.Header.Get("Retry-After"), problem.Violated)
		}
		fmt.Println()
	}
	try("198.51.100.2", "alice", "right")
	try("198.51.100.2", "alice", "right")
	for range 5 {
		try("203.0.113.9", "alice", "guess")
	}
	try("198.51.100.2", "alice", "right") // alice's account is locked
	try("203.0.113.9", "bob", "guess")    // and the guesser's IP
	try("198.51.100.2", "bob", "right")
	mock.Add(15 * time.Minute)
	try("198.51.100.2", "alice", "right")
	// Output:
	// 198.51.100.2 alice/right: 200
	// 198.51.100.2 alice/right: 200
	// 203.0.113.9 alice/guess: 401
	// 203.0.113.9 alice/guess: 401
	// 203.0.113.9 alice/guess: 401
	// 203.0.113.9 alice/guess: 401
	// 203.0.113.9 alice/guess: 401
	// 198.51.100.2 alice/right: 429 Retry-After: 900, locked by [account]
	// 203.0.113.9 bob/guess: 429 Retry-After: 900, locked by [ip]
	// 198.51.100.2 bob/right: 200
	// 198.51.100.2 alice/right: 200
}
