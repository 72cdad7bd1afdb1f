package keylimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	fmt.Println(keylimit.PerSecond(3).WithBurst(1).FillTime())
	// Output:
	// 100/10s
	// 10/min burst 3
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

// A fixed window of 3 a minute per user. Windows are aligned to the clock:
// the quota comes back whole when the minute turns, however recently it
// was spent. The mock clock starts at the Unix epoch, on a minute boundary.
func ExampleFixedWindow() {
	mock := clock.NewMock()
	lim, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(3), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mock.Add(50 * time.Second)
	for i := 1; i <= 4; i++ {
		fmt.Printf("0:50 alice request %d: %v\n", i, lim.Allow("alice"))
	}
	fmt.Println("0:50 bob:", lim.AllowN("bob", 3))
	mock.Add(10 * time.Second)
	fmt.Println("1:00 alice:", lim.Allow("alice"))
	fmt.Println("keys tracked:", lim.Stats().Keys)
	// Output:
	// 0:50 alice request 1: true
	// 0:50 alice request 2: true
	// 0:50 alice request 3: true
	// 0:50 alice request 4: false
	// 0:50 bob: true
	// 1:00 alice: true
	// keys tracked: 2
}

func ExampleFixedWindow_Take() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	mock.Add(15 * time.Second)
	r := lim.Take("api-key-1", 8)
	fmt.Printf("allowed=%v remaining=%d reset=%v\n", r.Allowed, r.Remaining, r.ResetAfter)
	r = lim.Take("api-key-1", 5)
	fmt.Printf("allowed=%v remaining=%d retry=%v\n", r.Allowed, r.Remaining, r.RetryAfter)
	r = lim.Peek("api-key-1")
	fmt.Printf("peek: would pass=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// allowed=true remaining=2 reset=45s
	// allowed=false remaining=2 retry=45s
	// peek: would pass=true remaining=2
}

func ExampleFixedWindow_Wait() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(1), keylimit.WithClock(mock))
	defer lim.Close()

	fmt.Println(lim.Wait(context.Background(), "partner.example"))
	// The window ends in a minute; this context gives 10 s, so Wait fails
	// at once rather than sleeping in vain.
	ctx, cancel := mock.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(lim.Wait(ctx, "partner.example"))
	// Output:
	// <nil>
	// keylimit: waiting 1m0s for 1 event would outlast the context deadline, 10s away
}

// Windows are aligned to the clock, not to the limiter's creation: a limiter
// made at 0:30 ends its first minute window at 1:00, like every other
// instance's. A count the window's word cannot hold is an error.
func ExampleNewFixedWindow() {
	mock := clock.NewMock()
	mock.Add(30 * time.Second)
	lim, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(100), keylimit.WithClock(mock))
	fmt.Println(lim.Limit(), err)
	defer lim.Close()
	r := lim.Take("k", 1)
	fmt.Printf("remaining=%d reset=%v\n", r.Remaining, r.ResetAfter)

	_, err = keylimit.NewFixedWindow[string](keylimit.Per(10, time.Nanosecond))
	fmt.Println(err)
	// Output:
	// 100/min <nil>
	// remaining=99 reset=30s
	// keylimit: a FixedWindow counts at most 3 events per 1ns, not 10
}

// Refund undoes an admission, for a request that one limit admitted and
// another refused, or that failed before doing any work.
func ExampleFixedWindow_Refund() {
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerHour(2))
	defer lim.Close()

	lim.Allow("upload:alice")
	_, upload := lim.Admit("upload:alice", 1)
	fmt.Println("remaining:", lim.Peek("upload:alice").Remaining)
	lim.Refund("upload:alice", upload) // the upload failed: give its event back
	fmt.Println("remaining:", lim.Peek("upload:alice").Remaining)
	lim.Reset("upload:alice")
	fmt.Println("remaining:", lim.Peek("upload:alice").Remaining)
	// Output:
	// remaining: 0
	// remaining: 1
	// remaining: 2
}

// A sliding window of 3 a minute: where a fixed window would open again at
// 1:00, the sliding window waits until the events of 0:50 are a minute old.
func ExampleSlidingWindow() {
	mock := clock.NewMock()
	lim, err := keylimit.NewSlidingWindow[string](keylimit.PerMinute(3), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mock.Add(50 * time.Second)
	fmt.Println("0:50:", lim.AllowN("alice", 3))
	mock.Add(10 * time.Second)
	r := lim.Take("alice", 1)
	fmt.Printf("1:00: %v, retry after %v\n", r.Allowed, r.RetryAfter)
	mock.Add(r.RetryAfter)
	fmt.Println("1:50:", lim.AllowN("alice", 3))
	// Output:
	// 0:50: true
	// 1:00: false, retry after 50s
	// 1:50: true
}

// RetryAfter is when enough events leave the window for the request to fit:
// one needs the oldest gone, two need the two oldest gone.
func ExampleSlidingWindow_Take() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewSlidingWindow[string](keylimit.PerMinute(3), keylimit.WithClock(mock))
	defer lim.Close()

	lim.Allow("k") // at 0:00
	mock.Add(20 * time.Second)
	lim.AllowN("k", 2) // at 0:20
	mock.Add(10 * time.Second)
	for _, n := range []int{1, 2} {
		r := lim.Take("k", n)
		fmt.Printf("Take(%d) at 0:30: allowed=%v retry=%v reset=%v\n", n, r.Allowed, r.RetryAfter, r.ResetAfter)
	}
	r := lim.Take("k", 4)
	fmt.Printf("Take(4) at 0:30: allowed=%v never=%v\n", r.Allowed, r.RetryAfter == keylimit.InfDuration)
	r = lim.Peek("k")
	fmt.Printf("Peek at 0:30: would pass=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// Take(1) at 0:30: allowed=false retry=30s reset=50s
	// Take(2) at 0:30: allowed=false retry=50s reset=50s
	// Take(4) at 0:30: allowed=false never=true
	// Peek at 0:30: would pass=false remaining=0
}

// A SlidingWindow keeps each key's last Events admission times, so its
// quota is capped; larger ones are for a SlidingCounter.
func ExampleNewSlidingWindow() {
	_, err := keylimit.NewSlidingWindow[string](keylimit.PerHour(50_000))
	fmt.Println(err)
	lim, err := keylimit.NewSlidingWindow[string](keylimit.PerHour(keylimit.MaxSlidingWindowEvents))
	fmt.Println(lim.Limit(), err)
	lim.Close()
	// Output:
	// keylimit: a SlidingWindow keeps at most 10000 events per key (8 bytes each), not 50000: use a SlidingCounter for large quotas
	// 10000/h <nil>
}

// A sliding counter of 10 a minute. At 1:15, the 10 events of the previous
// minute weigh for the 45 s of it still inside the sliding minute: 7.5,
// counted as 8, so 2 more fit.
func ExampleSlidingCounter() {
	mock := clock.NewMock()
	lim, err := keylimit.NewSlidingCounter[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mock.Add(50 * time.Second)
	fmt.Println("0:50:", lim.AllowN("alice", 10))
	mock.Add(25 * time.Second)
	r := lim.Peek("alice")
	fmt.Printf("1:15: remaining=%d\n", r.Remaining)
	fmt.Println("1:15:", lim.AllowN("alice", 2), lim.Allow("alice"))
	// Output:
	// 0:50: true
	// 1:15: remaining=2
	// 1:15: true false
}

// RetryAfter is exact for the estimate: the moment the previous window's
// weight has faded enough.
func ExampleSlidingCounter_Take() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewSlidingCounter[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	lim.AllowN("k", 10) // at 0:00
	mock.Add(time.Minute)
	r := lim.Take("k", 4)
	fmt.Printf("1:00: allowed=%v retry=%v reset=%v\n", r.Allowed, r.RetryAfter, r.ResetAfter)
	mock.Add(r.RetryAfter)
	r = lim.Take("k", 4)
	fmt.Printf("1:24: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// 1:00: allowed=false retry=24s reset=1m0s
	// 1:24: allowed=true remaining=0
}

// Two counts and a window index share a SlidingCounter's word, which
// bounds its quota by its period.
func ExampleNewSlidingCounter() {
	_, err := keylimit.NewSlidingCounter[string](keylimit.PerSecond(100_000))
	fmt.Println(err)
	lim, err := keylimit.NewSlidingCounter[string](keylimit.PerHour(100_000))
	fmt.Println(lim.Limit(), err)
	lim.Close()
	// Output:
	// keylimit: a SlidingCounter counts at most 65535 events per 1s, not 100000: use a longer Period, or a FixedWindow or TokenBucket
	// 100000/h <nil>
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

// WaitN waits on any Limiter, here a combination made by All: 5 a second
// and 2 a minute on one key, on the limiters' mock clock.
func ExampleWaitN() {
	mock := clock.NewMock()
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(5), keylimit.WithClock(mock))
	perMinute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	lim := keylimit.All[string](perSecond, perMinute)

	fmt.Println(keylimit.WaitN(context.Background(), lim, "partner", 2))
	fmt.Println(keylimit.WaitN(context.Background(), lim, "partner", 3))

	// The next event is 30 s away; this context gives only 10 s.
	ctx, cancel := mock.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(keylimit.WaitN(ctx, lim, "partner", 1))
	// Output:
	// <nil>
	// keylimit: n exceeds the limit: 3 events can never pass a limit of 2 at once
	// keylimit: waiting 30s for 1 event would outlast the context deadline, 10s away
}

// One limiter, two tiers: paying clients get twice the quota. The tiers
// are given right after the constructor, before the limiter serves.
func ExampleTokenBucket_SetKeyLimit_tiers() {
	mock := clock.NewMock()
	paying := map[string]bool{"acme": true}
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	defer lim.Close()
	_ = lim.SetKeyLimit(func(client string) keylimit.Limit {
		if paying[client] {
			return keylimit.PerMinute(4)
		}
		return keylimit.Limit{} // the limiter's own: 2 a minute
	})

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
	// before: 0 left of 10/min
	// after: 20 left of 30/min
	// keylimit: events 0 is below 1
}

// An operator lowers a limit during an incident: a key keeps the count of
// its window, which is now above the new limit, so it waits for the window
// to end; the next window has the new limit.
func ExampleFixedWindow_SetLimit() {
	mock := clock.NewMock() // on a minute boundary
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	mock.Add(15 * time.Second)
	lim.AllowN("k", 8)
	fmt.Println("before:", lim.Peek("k").Remaining, "left of", lim.Limit())
	if err := lim.SetLimit(keylimit.PerMinute(5)); err != nil {
		panic(err)
	}
	r := lim.Take("k", 1)
	fmt.Println("after:", r.Remaining, "left of", lim.Limit(), "retry in", r.RetryAfter)
	mock.Add(r.RetryAfter)
	fmt.Println("next minute:", lim.AllowN("k", 5), lim.Allow("k"))
	// Output:
	// before: 2 left of 10/min
	// after: 0 left of 5/min retry in 45s
	// next minute: true false
}

// A key keeps its admission times across changes of limit: a raised limit
// gives it the difference at once, and lowering the limit and raising it
// back gives back nothing.
func ExampleSlidingWindow_SetLimit() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewSlidingWindow[string](keylimit.Per(3, 10*time.Second), keylimit.WithClock(mock))
	defer lim.Close()

	lim.AllowN("k", 3)
	fmt.Println("3 of 3 used, Allow:", lim.Allow("k"))
	_ = lim.SetLimit(keylimit.Per(5, 10*time.Second))
	fmt.Println("raised to 5, AllowN(2):", lim.AllowN("k", 2))
	_ = lim.SetLimit(keylimit.Per(1, 10*time.Second))
	_ = lim.SetLimit(keylimit.Per(5, 10*time.Second))
	r := lim.Take("k", 1)
	fmt.Println("lowered to 1 and raised back to 5, Allow:", r.Allowed, "retry in", r.RetryAfter)
	// Output:
	// 3 of 3 used, Allow: false
	// raised to 5, AllowN(2): true
	// lowered to 1 and raised back to 5, Allow: false retry in 10s
}

// A key keeps its counts across a change of limit: its estimate is the same
// number, weighed against the new Events.
func ExampleSlidingCounter_SetLimit() {
	mock := clock.NewMock() // on a minute boundary
	lim, _ := keylimit.NewSlidingCounter[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	defer lim.Close()

	lim.AllowN("k", 8)
	mock.Add(90 * time.Second) // the 8 now weigh half: 4
	fmt.Println("before:", lim.Peek("k").Remaining, "left of", lim.Limit())
	_ = lim.SetLimit(keylimit.PerMinute(20))
	fmt.Println("raised:", lim.Peek("k").Remaining, "left of", lim.Limit())
	_ = lim.SetLimit(keylimit.PerMinute(3))
	r := lim.Peek("k")
	fmt.Println("lowered:", r.Remaining, "left of", lim.Limit(), "retry in", r.RetryAfter)
	// Output:
	// before: 6 left of 10/min
	// raised: 16 left of 20/min
	// lowered: 0 left of 3/min retry in 15s
}

// Tiers on a sliding window: one limiter, each client under its own quota
// in any minute.
func ExampleSlidingWindow_SetKeyLimit() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewSlidingWindow[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	defer lim.Close()
	_ = lim.SetKeyLimit(func(client string) keylimit.Limit {
		if client == "acme" {
			return keylimit.PerMinute(5)
		}
		return keylimit.Limit{} // the limiter's own: 2 a minute
	})

	for _, client := range []string{"acme", "hobbyist"} {
		n := 0
		for lim.Allow(client) {
			n++
		}
		r := lim.Take(client, 1)
		fmt.Printf("%s: %d requests, limit %d, retry in %v\n", client, n, r.Limit, r.RetryAfter)
	}
	// Output:
	// acme: 5 requests, limit 5, retry in 1m0s
	// hobbyist: 2 requests, limit 2, retry in 1m0s
}

// A cap of two keys. A third key is refused while both are in use, with
// Untracked set so that a server can answer 503 rather than 429; once a key
// has gone idle, it makes room.
func ExampleWithMaxKeys() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(1), keylimit.WithClock(mock), keylimit.WithMaxKeys(2))
	defer lim.Close()

	fmt.Println(lim.Allow("alice"), lim.Allow("bob"))
	r := lim.Take("mallory", 1)
	fmt.Printf("mallory: allowed=%v untracked=%v retry-after=%v\n", r.Allowed, r.Untracked, r.RetryAfter)
	mock.Add(time.Minute) // alice and bob are idle again
	r = lim.Take("mallory", 1)
	fmt.Printf("a minute later: allowed=%v untracked=%v keys=%d\n", r.Allowed, r.Untracked, lim.Stats().Keys)
	// Output:
	// true true
	// mallory: allowed=false untracked=true retry-after=1m0s
	// a minute later: allowed=true untracked=false keys=1
}

// At the cap, keys that cannot be tracked are admitted without being
// counted: availability for new clients over protection.
func ExampleWithAdmitUntracked() {
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithMaxKeys(1), keylimit.WithAdmitUntracked())
	defer lim.Close()

	fmt.Println(lim.Allow("alice"), lim.Allow("alice"))
	r := lim.Take("bob", 1)
	fmt.Println(r.Allowed, r.Untracked, lim.Allow("bob"))
	// Output:
	// true false
	// true true true
}

// WithEvictionInterval(0) turns the background sweep off: keys stay until
// Reset (or until a key cap needs their place).
func ExampleWithEvictionInterval() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[int](keylimit.PerSecond(10), keylimit.WithClock(mock), keylimit.WithEvictionInterval(0))
	defer lim.Close()

	lim.Allow(1)
	lim.Allow(2)
	mock.Add(time.Hour)
	fmt.Println("keys after an idle hour:", lim.Stats().Keys)
	lim.Reset(1)
	fmt.Println("after Reset(1):", lim.Stats().Keys)
	// Output:
	// keys after an idle hour: 2
	// after Reset(1): 1
}

// Refund gives back what a request took when the work it paid for did not
// happen.
func ExampleTokenBucket_Refund() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(mock))
	defer lim.Close()

	lim.Allow("export")
	_, exports := lim.Admit("export", 2)
	fmt.Println("remaining:", lim.Peek("export").Remaining)
	lim.Refund("export", exports) // the two exports failed upstream
	fmt.Println("after the refund:", lim.Peek("export").Remaining)
	// A minute later the tokens would have refilled anyway: a refund
	// then gives back nothing.
	_, late := lim.Admit("export", 1)
	mock.Add(time.Minute)
	lim.Refund("export", late)
	fmt.Println("a minute later:", lim.Peek("export").Remaining)
	// Output:
	// remaining: 2
	// after the refund: 4
	// a minute later: 5
}

// A limit from configuration: JSON, YAML or a flag carry it as text.
func ExampleLimit_UnmarshalText() {
	var l keylimit.Limit
	err := l.UnmarshalText([]byte("10/s burst 20"))
	fmt.Println(l, l.WithBurst(1).FillTime(), l.BurstSize(), err)
	fmt.Println(l.UnmarshalText([]byte("10/fortnight")))
	// Output:
	// 10/s burst 20 100ms 20 <nil>
	// keylimit: limit "10/fortnight": period "fortnight" is neither a unit (ms, s, min, h, d) nor a duration such as 90s
}

// A Result reads as a line of a log.
func ExampleResult_String() {
	mock := clock.NewMock()
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	defer lim.Close()
	fmt.Println(lim.Take("ip:203.0.113.7", 2))
	fmt.Println(lim.Take("ip:203.0.113.7", 1))
	// Output:
	// allowed: 0 of 2 left, full in 1m0s
	// refused: 0 of 2 left, retry in 30s, full in 1m0s
}

// A handler that asks two limiters of its own, a per-user and a global one,
// answers with both Results as one, as All would: refused if either refuses,
// the tighter quota left, full when both are (the global window's end).
func ExampleResult_And() {
	mock := clock.NewMock()
	perUser, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(5), keylimit.WithClock(mock))
	defer perUser.Close()
	global, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(100), keylimit.WithClock(mock))
	defer global.Close()
	for range 6 {
		r := perUser.Take("alice", 1).And(global.Take("all", 1))
		fmt.Println(r)
	}
	// Output:
	// allowed: 4 of 5 left, full in 1m0s
	// allowed: 3 of 5 left, full in 1m0s
	// allowed: 2 of 5 left, full in 1m0s
	// allowed: 1 of 5 left, full in 1m0s
	// allowed: 0 of 5 left, full in 1m0s
	// refused: 0 of 5 left, retry in 200ms, full in 1m0s
}

// WithStats counts decisions for metrics; keys, evictions and untracked
// requests are counted anyway.
func ExampleWithStats() {
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerMinute(2), keylimit.WithStats())
	defer lim.Close()
	for range 3 {
		lim.Allow("k")
	}
	st := lim.Stats()
	fmt.Printf("keys=%d admitted=%d refused=%d\n", st.Keys, st.Admitted, st.Refused)
	// Output:
	// keys=1 admitted=2 refused=1
}

// Tiers given after construction: the compiler checks the function's key
// type against the limiter's.
func ExampleTokenBucket_SetKeyLimit() {
	lim, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(5))
	defer lim.Close()
	_ = lim.SetKeyLimit(func(apiKey string) keylimit.Limit {
		if apiKey == "acme" {
			return keylimit.PerMinute(50) // a paying client
		}
		return keylimit.Limit{} // the bucket's own: 5 a minute
	})
	fmt.Println(lim.Peek("acme").Remaining, lim.Peek("hobbyist").Remaining)
	// Output:
	// 50 5
}

// All gives back what the first limits took when a later one refuses: the
// minute's quota is intact after the hour refused.
func ExampleAll_refund() {
	mock := clock.NewMock()
	minute, _ := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	hour, _ := keylimit.NewFixedWindow[string](keylimit.PerHour(1), keylimit.WithClock(mock))
	defer minute.Close()
	defer hour.Close()
	both := keylimit.All[string](minute, hour)
	fmt.Println(both.Allow("k"), both.Allow("k"))
	fmt.Println("the minute's quota:", minute.Peek("k").Remaining)
	// Output:
	// true false
	// the minute's quota: 9
}

// WithLogger: a key cap reached is logged once, not once per request.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // no time: the output is checked
			}
			return a
		},
	}))
	lim, _ := keylimit.NewFixedWindow[string](keylimit.PerHour(10), keylimit.WithMaxKeys(1), keylimit.WithLogger(logger))
	defer lim.Close()
	lim.Allow("alice")
	for _, ip := range []string{"bob", "carol", "dave"} {
		lim.Allow(ip) // each refused: no place for its key
	}
	// Output:
	// level=WARN msg="keylimit: the key cap is reached: new keys are not tracked, and the overflow policy decides for them" max_keys=1 admit_untracked=false
}
