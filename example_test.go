package keylimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// A bucket of 3 per user, refilling one a second. The mock clock makes the
// example independent of the machine's speed.
func ExampleTokenBucket() {
	mock := clock.NewMock()
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(3), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	for i := 1; i <= 4; i++ {
		fmt.Printf("alice request %d: %v\n", i, lim.Allow("alice"))
	}
	fmt.Println("bob request 1:", lim.Allow("bob"))
	mock.Add(time.Second)
	fmt.Println("alice, a second later:", lim.Allow("alice"))
	// Output:
	// alice request 1: true
	// alice request 2: true
	// alice request 3: true
	// alice request 4: false
	// bob request 1: true
	// alice, a second later: true
}

func ExampleTokenBucket_Take() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	r := lim.Take("api-key-1", 8)
	fmt.Printf("allowed=%v remaining=%d reset=%v\n", r.Allowed, r.Remaining, r.ResetAfter)
	r = lim.Take("api-key-1", 5)
	fmt.Printf("allowed=%v remaining=%d retry=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	r = lim.Take("api-key-1", 11)
	fmt.Printf("allowed=%v never=%v\n", r.Allowed, r.RetryAfter == keylimit.InfDuration)
	// Output:
	// allowed=true remaining=2 reset=48s
	// allowed=false remaining=2 retry=18s
	// allowed=false never=true
}

func ExampleTokenBucket_Peek() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[int](keylimit.PerSecond(2), keylimit.WithClock(mock))
	defer lim.Close()

	lim.AllowN(7, 2)
	r := lim.Peek(7)
	fmt.Printf("would pass=%v retry=%v\n", r.Allowed, r.RetryAfter)
	mock.Add(500 * time.Millisecond)
	r = lim.Peek(7)
	fmt.Printf("would pass=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// would pass=false retry=500ms
	// would pass=true remaining=1
}

func ExampleTokenBucket_Wait() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithClock(mock))
	defer lim.Close()

	fmt.Println(lim.Wait(context.Background(), "partner.example"))

	// The next token is a second away; this context gives only 100 ms, so
	// Wait fails at once rather than sleeping in vain.
	ctx, cancel := mock.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := lim.Wait(ctx, "partner.example")
	fmt.Println(errors.Is(err, keylimit.ErrWouldExceedDeadline))
	fmt.Println(err)

	err = lim.WaitN(context.Background(), "partner.example", 2)
	fmt.Println(errors.Is(err, keylimit.ErrExceedsLimit))
	// Output:
	// <nil>
	// true
	// keylimit: waiting 1s for 1 event would outlast the context deadline, 100ms away
	// true
}

func ExampleTokenBucket_Reset() {
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerHour(1))
	defer lim.Close()

	fmt.Println(lim.Allow("login:alice"), lim.Allow("login:alice"))
	lim.Reset("login:alice") // e.g. after a successful password reset
	fmt.Println(lim.Allow("login:alice"))
	// Output:
	// true false
	// true
}

func ExamplePer() {
	fmt.Println(keylimit.Per(100, 10*time.Second))
	fmt.Println(keylimit.PerMinute(10).WithBurst(3))
	fmt.Println(keylimit.PerSecond(3).Interval())
	// Output:
	// 100/10s
	// 10/1m0s burst 3
	// 333.333334ms
}

func ExampleLimit_Validate() {
	fmt.Println(keylimit.PerSecond(0).Validate())
	fmt.Println(keylimit.PerSecond(5).WithBurst(0).Validate())
	_, err := keylimit.NewTokenBucket[string](keylimit.Per(10, -time.Second))
	fmt.Println(err)
	// Output:
	// keylimit: events 0 is below 1
	// keylimit: burst 0 is below 1
	// keylimit: period -1s is not positive
}

func ExampleWithClock() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(1), keylimit.WithClock(mock))
	defer lim.Close()

	fmt.Println(lim.Allow("k"), lim.Allow("k"))
	mock.Add(59 * time.Second)
	fmt.Println(lim.Allow("k"))
	mock.Add(time.Second)
	fmt.Println(lim.Allow("k"))
	// Output:
	// true false
	// false
	// true
}

// Two limits on one key: 5 a second and 7 a minute. A refused request takes
// nothing from either, and each Result reports the limit that binds.
func ExampleAll() {
	mock := clock.NewMock()
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(5), keylimit.WithClock(mock))
	perMinute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(7), keylimit.WithClock(mock))
	lim := keylimit.All[string](perSecond, perMinute)

	for i := 1; i <= 9; i++ {
		if i == 7 {
			mock.Add(time.Second)
			fmt.Println("a second later:")
		}
		r := lim.Take("api-key", 1)
		fmt.Printf("request %d: allowed=%v remaining=%d of %d\n", i, r.Allowed, r.Remaining, r.Limit)
	}
	// Output:
	// request 1: allowed=true remaining=4 of 5
	// request 2: allowed=true remaining=3 of 5
	// request 3: allowed=true remaining=2 of 5
	// request 4: allowed=true remaining=1 of 5
	// request 5: allowed=true remaining=0 of 5
	// request 6: allowed=false remaining=0 of 5
	// a second later:
	// request 7: allowed=true remaining=1 of 7
	// request 8: allowed=true remaining=0 of 7
	// request 9: allowed=false remaining=0 of 7
}

// WaitN waits on any Limiter, here a combination made by All, which has no
// Wait method of its own: 5 a second and 2 a minute on one key.
func ExampleWaitN() {
	mock := clock.NewMock()
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(5), keylimit.WithClock(mock))
	perMinute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	lim := keylimit.All[string](perSecond, perMinute)

	fmt.Println(keylimit.WaitN(context.Background(), lim, "partner", 2, mock))
	fmt.Println(keylimit.WaitN(context.Background(), lim, "partner", 3, mock))

	// The next event is 30 s away; this context gives only 10 s.
	ctx, cancel := mock.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(keylimit.WaitN(ctx, lim, "partner", 1, mock))
	// Output:
	// <nil>
	// keylimit: n exceeds the limit: 3 events can never pass a limit of 2 at once
	// keylimit: waiting 30s for 1 event would outlast the context deadline, 10s away
}

// One limiter, two tiers: paying clients get twice the quota.
func ExampleWithKeyLimit() {
	mock := clock.NewMock()
	paying := map[string]bool{"acme": true}
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock),
		keylimit.WithKeyLimit(func(client string) keylimit.Limit {
			if paying[client] {
				return keylimit.PerMinute(4)
			}
			return keylimit.Limit{} // the limiter's own: 2 a minute
		}))
	defer lim.Close()

	for _, client := range []string{"acme", "hobbyist"} {
		n := 0
		for lim.Allow(client) {
			n++
		}
		fmt.Printf("%s: %d requests, limit %d\n", client, n, lim.Peek(client).Limit)
	}
	// Output:
	// acme: 4 requests, limit 4
	// hobbyist: 2 requests, limit 2
}

// An operator raises a limit during an incident; keys keep what they owe.
func ExampleTokenBucket_SetLimit() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	lim.AllowN("k", 10)
	fmt.Println("before:", lim.Peek("k").Remaining, "left of", lim.Limit())
	if err := lim.SetLimit(keylimit.PerMinute(30)); err != nil {
		panic(err)
	}
	fmt.Println("after:", lim.Peek("k").Remaining, "left of", lim.Limit())
	fmt.Println(lim.SetLimit(keylimit.PerMinute(0)))
	// Output:
	// before: 0 left of 10/1m0s
	// after: 20 left of 30/1m0s
	// keylimit: events 0 is below 1
}
