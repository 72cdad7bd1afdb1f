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
			secs, _ := v.Decision.RetryAfterSeconds()
			fmt.Printf("  refused by %q, Retry-After: %d\n", v.Decision.Policy, secs)
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

// A client reads a RateLimit field as the draft asks. Here "minute" is
// used up for 42 seconds more, "hour" has quota left, and "day" says no
// number of remaining quota: it counts for nothing. A field that is not a
// valid list (a trailing comma) says nothing at all, not even its valid
// members.
func ExampleReadRateLimit() {
	exhausted, any := quota.ReadRateLimit(`"minute";r=0;t=42, "hour";r=90;t=600, "day";r=oops`)
	fmt.Println("a used-up policy has quota again in", exhausted, "s; every policy is whole in", any, "s")
	exhausted, any = quota.ReadRateLimit(`"minute";r=0;t=42,`)
	fmt.Println("malformed:", exhausted, any)
	// Output:
	// a used-up policy has quota again in 42 s; every policy is whole in 600 s
	// malformed: -1 -1
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
