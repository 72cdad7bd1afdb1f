package quota_test

import (
	"context"
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
	// RateLimit: "minute";r=0;t=60, "hour";r=98;t=72
	//   handler runs
	// RateLimit: "minute";r=0;t=60, "hour";r=98;t=72
	//   refused by "minute", Retry-After: 30
}
