package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

// Two reports at once per tenant: each request holds a slot while its
// handler runs. Here the tenant's first report, while it runs, sends a
// second, and the second a third: the third finds both slots held and is
// refused, 429 with Retry-After (the limiter's estimate); once the two
// have ended, their slots are free again and a fourth passes.
func ExampleNew_concurrent() {
	limit, err := httplimit.New(httplimit.Config{
		Key:      httplimit.Header("X-Tenant"),
		Policies: []quota.Policy{quota.Concurrent("reports", 2)},
	})
	if err != nil {
		panic(err)
	}
	var reports http.Handler
	send := func(name string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/report?name="+name, nil)
		r.Header.Set("X-Tenant", "acme")
		reports.ServeHTTP(w, r)
		fmt.Println(name+":", w.Code, "RateLimit:", w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Println("  Retry-After:", ra)
		}
	}
	reports = limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("name") {
		case "first":
			fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
			send("second") // while first runs
		case "second":
			send("third") // while first and second run
		}
	}))
	send("first")
	send("fourth")
	// Output:
	// RateLimit-Policy: "reports";q=2;qu="concurrent-requests"
	// third: 429 RateLimit: "reports";r=0
	//   Retry-After: 1
	// second: 200 RateLimit: "reports";r=0
	// first: 200 RateLimit: "reports";r=1
	// fourth: 200 RateLimit: "reports";r=1
}
