package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

// A bucket of 3 requests per client IP, refilling one every 20 s, in front
// of a real server on 127.0.0.1. The mock clock makes the numbers exact.
// The refusal's body is an RFC 9457 problem of the draft's type
// quota-exceeded: http.Get sends no Accept, so any type will do; a client
// that accepts application/json and not problem+json gets
// {"error":"rate limit exceeded","retry_after_seconds":20,...}.
func ExampleNew() {
	mock := clock.NewMock()
	limit, err := httplimit.New(httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(3), keylimit.WithClock(mock))},
	})
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(limit(hello))
	defer srv.Close()

	for range 4 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		fmt.Println("  RateLimit-Policy:", resp.Header.Get("RateLimit-Policy"))
		fmt.Println("  RateLimit:", resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Println("  Retry-After:", resp.Header.Get("Retry-After"))
			fmt.Println("  Content-Type:", resp.Header.Get("Content-Type"))
			fmt.Print("  ", string(body))
		}
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "minute";q=3;w=60
	//   RateLimit: "minute";r=2;t=20
	// 200 OK
	//   RateLimit-Policy: "minute";q=3;w=60
	//   RateLimit: "minute";r=1;t=20
	// 200 OK
	//   RateLimit-Policy: "minute";q=3;w=60
	//   RateLimit: "minute";r=0;t=20
	// 429 Too Many Requests
	//   RateLimit-Policy: "minute";q=3;w=60
	//   RateLimit: "minute";r=0;t=20
	//   Retry-After: 20
	//   Content-Type: application/problem+json
	//   {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["minute"],"retry_after_seconds":20,"policy":"minute","limit":3,"remaining":0}
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })

// Tiers: "gold" clients get 5 requests a minute, everyone else 2. Each tier
// counts in its own bucket.
func ExampleConfig_tiers() {
	mock := clock.NewMock()
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(2), keylimit.WithClock(mock))},
		Tier: func(r *http.Request, key string) string {
			if strings.HasPrefix(key, "gold-") { // in real life: look the key up
				return "gold"
			}
			return ""
		},
		Tiers: map[string][]quota.Policy{
			"gold": {quota.Bucket("minute", keylimit.PerMinute(5), keylimit.WithClock(mock))},
		},
	})
	h := limit(hello)
	for _, key := range []string{"free-1", "gold-1"} {
		passed := 0
		for range 10 {
			if call(h, "/", "X-API-Key", key).StatusCode == http.StatusOK {
				passed++
			}
		}
		fmt.Printf("%s: %d of 10 passed\n", key, passed)
	}
	// Output:
	// free-1: 2 of 10 passed
	// gold-1: 5 of 10 passed
}

// Cost, Skip and DryRun: a search costs 5 of a quota of 10, health checks
// are not counted, and nothing is refused yet: the middleware only tells
// (OnDecision) what it would refuse.
func ExampleConfig() {
	mock := clock.NewMock()
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(10), keylimit.WithClock(mock))},
		Cost: func(r *http.Request) int {
			if r.URL.Path == "/search" {
				return 5
			}
			return 1
		},
		Skip:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		DryRun: true,
		OnDecision: func(r *http.Request, d quota.Decision) {
			if !d.Result.Allowed {
				fmt.Printf("  would refuse %s %s (cost %d, %d left)\n", d.Key, r.URL.Path, d.Cost, d.Result.Remaining)
			}
		},
	})
	h := limit(hello)
	for _, path := range []string{"/search", "/healthz", "/search", "/item", "/search"} {
		resp := call(h, path, "X-User", "ann")
		fmt.Println(strings.TrimSpace(fmt.Sprint(path, " ", resp.StatusCode, " ", resp.Header.Get("RateLimit"))))
	}
	// Output:
	// /search 200 "minute";r=5;t=6
	// /healthz 200
	// /search 200 "minute";r=0;t=6
	//   would refuse ann /item (cost 1, 0 left)
	// /item 200 "minute";r=0;t=6
	//   would refuse ann /search (cost 5, 0 left)
	// /search 200 "minute";r=0;t=6
}

// Two named policies on one key, 4 a second and 6 a minute: a request
// passes only if both admit it, and a refused one takes from neither.
func ExampleNew_policies() {
	mock := clock.NewMock()
	second, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(4), keylimit.WithClock(mock))
	minute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(6), keylimit.WithClock(mock))
	limit, _ := httplimit.New(httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []quota.Policy{
			{Name: "second", Limiter: second},
			{Name: "minute", Limiter: minute},
		},
	})
	h := limit(hello)
	for i := 1; i <= 8; i++ {
		if i == 6 {
			mock.Add(time.Second)
			fmt.Println("a second later:")
		}
		resp := call(h, "/", "X-User", "u")
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	fmt.Println(call(h, "/", "X-User", "u").Header.Get("RateLimit-Policy"))
	// Output:
	// 200 "second";r=3;t=1, "minute";r=5;t=10
	// 200 "second";r=2;t=1, "minute";r=4;t=10
	// 200 "second";r=1;t=1, "minute";r=3;t=10
	// 200 "second";r=0;t=1, "minute";r=2;t=10
	// 429 "second";r=0;t=1, "minute";r=2;t=10
	// a second later:
	// 200 "second";r=3;t=1, "minute";r=1;t=9
	// 200 "second";r=2;t=1, "minute";r=0;t=9
	// 429 "second";r=2;t=1, "minute";r=0;t=9
	// "second";q=4;w=1, "minute";q=6;w=60
}

// Window limiters count for policies too: 2 a second in a FixedWindow
// and 4 a minute in a SlidingWindow. w is each one's Period, and t the time
// until it has more quota: the fixed window's end, the sliding window's
// oldest admission leaving it.
func ExampleNew_windows() {
	mock := clock.NewMock() // at the Unix epoch, where windows start
	second, _ := keylimit.NewFixedWindow[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	minute, _ := keylimit.NewSlidingWindow[string](keylimit.PerMinute(4), keylimit.WithClock(mock))
	limit, _ := httplimit.New(httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []quota.Policy{
			{Name: "second", Limiter: second},
			{Name: "minute", Limiter: minute},
		},
	})
	h := limit(hello)
	for i := 1; i <= 6; i++ {
		if i == 4 {
			mock.Add(time.Second)
			fmt.Println("a second later:")
		}
		resp := call(h, "/", "X-User", "u")
		fmt.Print(resp.StatusCode, " ", resp.Header.Get("RateLimit"))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Print("; Retry-After: ", ra)
		}
		fmt.Println()
	}
	fmt.Println(call(h, "/", "X-User", "u").Header.Get("RateLimit-Policy"))
	// Output:
	// 200 "second";r=1;t=1, "minute";r=3;t=60
	// 200 "second";r=0;t=1, "minute";r=2;t=60
	// 429 "second";r=0;t=1, "minute";r=2;t=60; Retry-After: 1
	// a second later:
	// 200 "second";r=1;t=1, "minute";r=1;t=59
	// 200 "second";r=0;t=1, "minute";r=0;t=59
	// 429 "second";r=0;t=1, "minute";r=0;t=59; Retry-After: 59
	// "second";q=2;w=1, "minute";q=4;w=60
}

// Bucket builds a Policy on a new TokenBucket: 60 a minute, at most 10 at
// once. w is the time the empty bucket takes to refill: 10 s.
func ExampleNew_bucket() {
	limit, err := httplimit.New(httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{quota.Bucket("burst", keylimit.PerMinute(60).WithBurst(10))},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(call(limit(hello), "/").Header.Get("RateLimit-Policy"))

	_, err = httplimit.New(httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{quota.Bucket("broken", keylimit.PerMinute(0))},
	})
	fmt.Println(err)
	// Output:
	// "burst";q=10;w=10
	// httplimit: policy "broken": keylimit: events 0 is below 1
}

type userKey struct{}

// A KeyFunc of your own: the user an authentication middleware put in the
// request's context. A request without one has no key: quota.ErrNoKey makes it
// a 400, never a request counted under a shared empty key.
func ExampleKeyFunc() {
	byUser := func(r *http.Request) (string, error) {
		if u, ok := r.Context().Value(userKey{}).(string); ok && u != "" {
			return u, nil
		}
		return "", fmt.Errorf("myapp: not signed in: %w", quota.ErrNoKey)
	}
	limit, _ := httplimit.New(httplimit.Config{
		Key:      byUser,
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(10))},
	})
	h := limit(hello)

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, "ann")))
	fmt.Println(w.Code, w.Header().Get("RateLimit"))

	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body)
	// Output:
	// 200 "minute";r=9;t=6
	// 400 {"error":"myapp: not signed in: quota: the request carries no key"}
}

// Config.Error can answer key errors its own way: here 401 for a request
// without an API key.
func ExampleKeyFunc_noKey() {
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(10))},
		Error: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, quota.ErrNoKey) {
				http.Error(w, "an API key is required", http.StatusUnauthorized)
				return
			}
			http.Error(w, "internal error", http.StatusInternalServerError)
		},
	})
	resp := call(limit(hello), "/")
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output:
	// 401 an API key is required
}

func ExampleHeader() {
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{quota.Bucket("hour", keylimit.PerHour(2))},
	})
	h := limit(hello)
	for _, key := range []string{"k1", "k1", "k1", "k2", ""} {
		fmt.Printf("%q: %d\n", key, call(h, "/", "X-API-Key", key).StatusCode)
	}
	// Output:
	// "k1": 200
	// "k1": 200
	// "k1": 429
	// "k2": 200
	// "": 400
}

// Route keys by the ServeMux pattern, so the middleware wraps the handlers
// registered on the mux: every request to "GET /items/{id}" shares one
// quota, whatever the id.
func ExampleRoute() {
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Route,
		Policies: []quota.Policy{quota.Bucket("second", keylimit.PerSecond(2))},
		OnDecision: func(r *http.Request, d quota.Decision) {
			fmt.Printf("%s counts against %q: allowed=%v\n", r.URL.Path, d.Key, d.Result.Allowed)
		},
	})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", limit(hello))
	for _, path := range []string{"/items/1", "/items/2", "/items/3"} {
		call(mux, path)
	}
	// Output:
	// /items/1 counts against "GET /items/{id}": allowed=true
	// /items/2 counts against "GET /items/{id}": allowed=true
	// /items/3 counts against "GET /items/{id}": allowed=false
}

// Join counts each client on each route apart.
func ExampleJoin() {
	limit, _ := httplimit.New(httplimit.Config{
		Key:      httplimit.Join(httplimit.ClientIP{}.Key, httplimit.Route),
		Policies: []quota.Policy{quota.Bucket("minute", keylimit.PerMinute(30))},
		OnDecision: func(r *http.Request, d quota.Decision) {
			fmt.Println(d.Key)
		},
	})
	mux := http.NewServeMux()
	mux.Handle("GET /search", limit(hello))
	mux.Handle("POST /upload", limit(hello))
	for _, target := range []string{"GET /search", "POST /upload"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "[2001:db8:1:2::77]:40000"
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// 2001:db8:1:2::/64|GET /search
	// 2001:db8:1:2::/64|POST /upload
}

// Behind a load balancer on 10.0.0.0/8: the client is the rightmost
// address of X-Forwarded-For that is not the balancer. What the client
// wrote itself, on the left, is not believed.
func ExampleClientIP() {
	ip := httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.2.3:51000" // the balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.7")
	fmt.Println(ip.Key(r))

	r.RemoteAddr = "198.51.100.1:51000" // not through the balancer
	fmt.Println(ip.Key(r))
	// Output:
	// 203.0.113.7 <nil>
	// 198.51.100.1 <nil>
}

// Key groups IPv6 clients by /64, or the prefix configured.
func ExampleClientIP_Key() {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "[2001:db8:aaaa:bbbb:1:2:3:4]:443"
	for _, ip := range []httplimit.ClientIP{{}, {IPv6Prefix: 48}, {IPv6Prefix: 128}} {
		fmt.Println(ip.Key(r))
	}
	// Output:
	// 2001:db8:aaaa:bbbb::/64 <nil>
	// 2001:db8:aaaa::/48 <nil>
	// 2001:db8:aaaa:bbbb:1:2:3:4 <nil>
}

// Addr is the client's own address, for logs; the RFC 7239 Forwarded
// field is read when Header says so.
func ExampleClientIP_Addr() {
	ip := httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Header:         "Forwarded",
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.2:8080"
	r.Header.Set("Forwarded", `for="[2001:db8::9]:4711";proto=https, for=10.0.0.1`)
	fmt.Println(ip.Addr(r))

	r.Header.Set("Forwarded", "for=unknown")
	_, err := ip.Addr(r)
	fmt.Println(err)
	// Output:
	// 2001:db8::9 <nil>
	// httplimit: the request carries no key: cannot tell the client's address: Forwarded names it "unknown", not an IP address
}

// OnDecision sees every decision: count them by policy and outcome, as a
// Prometheus counter vector would.
func ExampleConfig_onDecision() {
	counts := map[string]int{}
	mock := clock.NewMock()
	limit, _ := httplimit.New(httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []quota.Policy{
			quota.Bucket("second", keylimit.PerSecond(2), keylimit.WithClock(mock)),
			quota.Bucket("day", keylimit.Per(3, 24*time.Hour), keylimit.WithClock(mock)),
		},
		OnDecision: func(r *http.Request, d quota.Decision) {
			outcome := "allowed"
			if !d.Result.Allowed {
				outcome = "refused"
			}
			counts[d.Policy+" "+outcome]++ // guard with a mutex in a real server
		},
	})
	h := limit(hello)
	for range 3 {
		call(h, "/", "X-User", "u")
	}
	mock.Add(time.Second)
	for range 2 {
		call(h, "/", "X-User", "u")
	}
	fmt.Println(counts)
	// Output:
	// map[day allowed:1 day refused:1 second allowed:2 second refused:1]
}
