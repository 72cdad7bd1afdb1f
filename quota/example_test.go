package quota_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// An adapter in a few lines: a key, a tier and a cost in; the fields, and
// an answer or the handler, out. Three requests of one client meet "minute",
// 2 a minute, and "hour", 100 an hour, on a clock that does not move: the
// third is refused by "minute", and takes nothing from "hour".
func Example() {
	mock := clock.NewMock()
	d, err := quota.New(quota.Config{Policies: []quota.Policy{
		quota.Bucket("minute", keylimit.PerMinute(2), keylimit.WithClock(mock)),
		quota.Bucket("hour", keylimit.PerHour(100), keylimit.WithClock(mock)),
	}})
	if err != nil {
		panic(err)
	}
	for i := range 3 {
		v, err := d.Decide(context.Background(), "alice", "", 1)
		if err != nil {
			panic(err) // the context ended
		}
		if i == 0 {
			fmt.Println("RateLimit-Policy:", v.RateLimitPolicy())
		}
		fmt.Println("RateLimit:", v.RateLimit())
		switch v.Action() {
		case quota.Proceed:
			fmt.Println("  handler runs")
			v.Finish() // once the handler has returned
		case quota.Refuse:
			fmt.Printf("  refused by %q, Retry-After: %s\n", v.Decision.Policy, v.RetryAfter())
		case quota.Fail:
			fmt.Println("  error:", v.Decision.Result.Err)
		}
	}
	// Output:
	// RateLimit-Policy: "minute";q=2;w=60, "hour";q=100;w=3600
	// RateLimit: "minute";r=1;t=30, "hour";r=99;t=36
	//   handler runs
	// RateLimit: "minute";r=0;t=30, "hour";r=98;t=36
	//   handler runs
	// RateLimit: "minute";r=0;t=30, "hour";r=98;t=36
	//   refused by "minute", Retry-After: 30
}

// A key function wraps ErrNoKey when the request lacks what its key needs:
// the adapters answer it as the client's fault (httplimit: 400).
func ExampleErrNoKey() {
	err := fmt.Errorf("myproxy: no X-Tenant header: %w", quota.ErrNoKey)
	fmt.Println(err)
	fmt.Println(errors.Is(err, quota.ErrNoKey))
	// Output:
	// myproxy: no X-Tenant header: quota: the request carries no key
	// true
}
