package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// Three instances of a service, each with its own client, share one limit
// of 5 a minute per user: between them they admit 5, where three in-memory
// limiters would admit 15. (A timeout of a second: a decision that took
// longer would be made by the failure policy, in process.)
func Example() {
	var fleet []*redislimit.TokenBucket
	for range 3 {
		client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer client.Close()
		lim, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(5), redislimit.WithTimeout(time.Second))
		if err != nil {
			panic(err)
		}
		fleet = append(fleet, lim)
	}
	defer fleet[0].Reset("alice")

	admitted := 0
	for range 4 {
		for _, lim := range fleet {
			if lim.Allow("alice") {
				admitted++
			}
		}
	}
	fmt.Println("admitted by the fleet:", admitted, "of 12")
	// Output:
	// admitted by the fleet: 5 of 12
}

func ExampleNewTokenBucket() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(2).WithBurst(3))
	if err != nil {
		panic(err)
	}
	defer lim.Reset("bob")

	for i := 1; i <= 4; i++ {
		r := lim.Take("bob", 1)
		fmt.Printf("request %d: allowed=%v remaining=%d retry=%v\n", i, r.Allowed, r.Remaining, r.RetryAfter.Round(time.Second))
	}
	// Output:
	// request 1: allowed=true remaining=2 retry=0s
	// request 2: allowed=true remaining=1 retry=0s
	// request 3: allowed=true remaining=0 retry=0s
	// request 4: allowed=false remaining=0 retry=30s
}

// A fixed window counts per minute, the windows aligned to whole minutes of
// Redis time; the refusal lasts until the window ends.
func ExampleNewFixedWindow() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := redislimit.NewFixedWindow(client, "login", keylimit.PerMinute(3))
	if err != nil {
		panic(err)
	}
	defer lim.Reset("carol")

	fmt.Println(lim.AllowN("carol", 3))
	r := lim.Take("carol", 1)
	fmt.Println(r.Allowed, r.RetryAfter > 0 && r.RetryAfter <= time.Minute)
	// Output:
	// true
	// false true
}

// A sliding window never admits more than Events in any interval of length
// Period; a refused request may pass when the oldest admission leaves.
func ExampleNewSlidingWindow() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := redislimit.NewSlidingWindow(client, "export", keylimit.Per(2, time.Hour))
	if err != nil {
		panic(err)
	}
	defer lim.Reset("dave")

	lim.Allow("dave")
	lim.Allow("dave")
	r := lim.Take("dave", 1)
	fmt.Println(r.Allowed, r.Remaining, r.RetryAfter.Round(time.Minute))
	// Output:
	// false 0 1h0m0s
}

// TakeContext bounds the call by its context as well, and returns the
// error when Redis fails; the Result is then the failure policy's.
func ExampleTokenBucket_TakeContext() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10),
		redislimit.WithFailurePolicy(redislimit.FailOpen()))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err := lim.TakeContext(ctx, "erin", 1)
	var rerr *redislimit.Error
	fmt.Println("allowed:", r.Allowed)
	fmt.Println("failed:", errors.As(err, &rerr), rerr.Op, rerr.Key)
	// Output:
	// allowed: true
	// failed: true take erin
}

// Refund gives back events that were admitted but not used, as keylimit.All
// does when another limit refuses the request.
func ExampleTokenBucket_Refund() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerHour(10))
	defer lim.Reset("frank")

	lim.AllowN("frank", 6)
	_, batch := lim.Admit("frank", 4)
	lim.Refund("frank", batch) // the batch failed: give its 4 back
	fmt.Println("remaining:", lim.Peek("frank").Remaining)
	// Output:
	// remaining: 4
}

func ExampleTokenBucket_Peek() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerHour(10))
	defer lim.Reset("gina")

	lim.AllowN("gina", 3)
	r := lim.Peek("gina")
	fmt.Println(r.Allowed, r.Remaining)
	fmt.Println(lim.Peek("gina").Remaining) // Peek took nothing
	// Output:
	// true 7
	// 7
}

// Limiters of different names never share state, even under the same
// limit: the default prefix holds the name, the algorithm and the limit.
// WithPrefix sets a prefix of your own.
func ExampleWithPrefix() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	login, _ := redislimit.NewFixedWindow(client, "login", keylimit.PerMinute(5), redislimit.WithTimeout(time.Second))
	signup, _ := redislimit.NewFixedWindow(client, "signup", keylimit.PerMinute(5), redislimit.WithTimeout(time.Second))
	own, _ := redislimit.NewFixedWindow(client, "login", keylimit.PerMinute(5), redislimit.WithPrefix("ratelimit:login:"))
	defer login.Reset("olga")
	defer signup.Reset("olga")

	fmt.Println(login.AllowN("olga", 5), signup.Allow("olga"))
	fmt.Println(login.StateKey("olga"))
	fmt.Println(signup.StateKey("olga"))
	fmt.Println(own.StateKey("olga"))
	// Output:
	// true true
	// keylimit:login:fixed:5/1m0s/5:{olga}
	// keylimit:signup:fixed:5/1m0s/5:{olga}
	// ratelimit:login:{olga}
}

// With Redis down, FailClosed refuses, FailOpen admits, and FailLocal
// decides in process on its share of the limit: here 10 a minute shared by
// an expected 2 instances, so 5 each.
func ExampleWithFailurePolicy() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	for _, p := range []redislimit.FailurePolicy{redislimit.FailClosed(), redislimit.FailOpen(), redislimit.FailLocal(2)} {
		lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10),
			redislimit.WithFailurePolicy(p), redislimit.WithTimeout(50*time.Millisecond))
		admitted := 0
		for range 10 {
			if lim.Allow("hank") {
				admitted++
			}
		}
		fmt.Printf("%s: admitted %d of 10\n", p, admitted)
	}
	// Output:
	// fail closed: admitted 0 of 10
	// fail open: admitted 10 of 10
	// fail local/2: admitted 5 of 10
}

func ExampleFailOpen() {
	fmt.Println(redislimit.FailOpen())
	// Output: fail open
}

func ExampleFailClosed() {
	fmt.Println(redislimit.FailClosed())
	// Output: fail closed
}

func ExampleFailLocal() {
	fmt.Println(redislimit.FailLocal(3))
	// Output: fail local/3
}

func ExampleFailurePolicy_String() {
	fmt.Println(redislimit.FailLocal(1).String())
	// Output: fail local/1
}

// WithOnError sees every failure; the calls answered during the failure
// backoff that follows are not failures of Redis, and are not reported.
func ExampleWithOnError() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	reported := 0
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10),
		redislimit.WithOnError(func(err error) { reported++ }))
	for range 5 {
		lim.Allow("ivan")
	}
	fmt.Println("errors reported:", reported)
	// Output:
	// errors reported: 1
}

// Without a backoff every call tries Redis (and waits for its timeout when
// Redis is stalled); ErrUnavailable marks the calls the backoff spared.
func ExampleWithFailureBackoff() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	for _, backoff := range []time.Duration{0, time.Minute} {
		lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10), redislimit.WithFailureBackoff(backoff))
		lim.Allow("judy")
		_, err := lim.TakeContext(context.Background(), "judy", 1)
		fmt.Printf("backoff %v: spared %v\n", backoff, errors.Is(err, redislimit.ErrUnavailable))
	}
	// Output:
	// backoff 0s: spared false
	// backoff 1m0s: spared true
}

func ExampleWithTimeout() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	_, err := redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10), redislimit.WithTimeout(20*time.Millisecond))
	fmt.Println(err)
	_, err = redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10), redislimit.WithTimeout(0))
	fmt.Println(err)
	// Output:
	// <nil>
	// redislimit: timeout 0s is not positive
}

// The deny cache answers a refused key in process until its RetryAfter
// has passed on the local clock (here a mock, stepped by hand).
func ExampleWithDenyCacheSize() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	mock := clock.NewMock()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerHour(1),
		redislimit.WithDenyCacheSize(10_000), keylimit.WithClock(mock), redislimit.WithTimeout(time.Second))
	defer lim.Reset("kim")

	lim.Allow("kim")
	first := lim.Take("kim", 1) // Redis refuses; remembered
	mock.Add(10 * time.Minute)
	again := lim.Take("kim", 1) // answered in process
	fmt.Println(again.Allowed, first.RetryAfter-again.RetryAfter)
	// Output:
	// false 10m0s
}

// WithClock sets the local clock, which only the deny cache, the failure
// backoff and the fallback limiter read: decisions are made on Redis time.
func ExampleWithClock() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	mock := clock.NewMock()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(1),
		keylimit.WithClock(mock), redislimit.WithFailurePolicy(redislimit.FailLocal(1)))
	fmt.Println(lim.Allow("lee"), lim.Allow("lee")) // the fallback decides, on the mock
	mock.Add(time.Minute)
	fmt.Println(lim.Allow("lee"))
	// Output:
	// true false
	// true
}

func ExampleError() {
	err := error(&redislimit.Error{Op: "take", Key: "mia", Err: context.DeadlineExceeded})
	fmt.Println(err)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// redislimit: take "mia": context deadline exceeded
	// true
}

func ExampleTokenBucket_Limit() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewSlidingWindow(client, "api", keylimit.PerMinute(30))
	fmt.Println(lim.Limit())
	// Output: 30/min
}

// WaitN waits for capacity across the fleet instead of being refused; a wait
// longer than the context allows fails at once.
func ExampleTokenBucket_WaitN() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerSecond(10).WithBurst(1))
	defer lim.Reset("partner-api")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 3 { // the second and third wait about 100 ms each
		if err := lim.WaitN(ctx, "partner-api", 1); err != nil {
			panic(err)
		}
	}
	fmt.Println("3 calls made")
	err := lim.WaitN(ctx, "partner-api", 2)
	fmt.Println(errors.Is(err, keylimit.ErrExceedsLimit))
	// Output:
	// 3 calls made
	// true
}

// WithFleetSize says how many instances share the limit: while Redis fails,
// each then decides alone on its share, here 10 a minute shared by 2.
func ExampleWithFleetSize() {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10), redislimit.WithFleetSize(2))
	admitted := 0
	for range 10 {
		if lim.Allow("nina") {
			admitted++
		}
	}
	fmt.Printf("with Redis down, this instance admitted %d of 10\n", admitted)
	// Output:
	// with Redis down, this instance admitted 5 of 10
}

// Without a failure policy or a fleet size, a limiter says at construction
// what a fleet would admit while Redis fails (here to a logger that leaves
// out the time).
func ExampleWithLogger() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "hint" {
				return slog.Attr{}
			}
			return a
		},
	}))
	redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10), keylimit.WithLogger(logger))
	// Output:
	// level=INFO msg="redislimit: limiter ready; while Redis fails, its failure policy decides" limiter=api prefix=keylimit:api:bucket:10/1m0s/10: limit=10/min policy="fail local/fleet" admits="each instance decides alone on 1/N of 10/min, N the instances announced on Redis at its last answer (1 until the first), so the fleet admits up to about 10/min"
}

// Ping checks at start-up that Redis answers, takes the script, will not
// evict the limiter's keys, and keeps them on disk (this one has
// appendonly yes).
func ExampleTokenBucket_Ping() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(10))
	fmt.Println(lim.Ping(context.Background()))
	// Output:
	// <nil>
}

// Stats counts requests, round trips and the deny cache's answers.
func ExampleTokenBucket_Stats() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "stats", keylimit.PerHour(2), redislimit.WithTimeout(time.Second))
	defer lim.Reset("omar")

	for range 5 {
		lim.Allow("omar") // 2 admitted; the third refused by Redis, the others by the deny cache
	}
	st := lim.Stats()
	fmt.Println(st.Admitted, st.Refused, st.Calls, st.CacheHits)
	// Output:
	// 2 3 3 2
}

// The seed scenario's tiers on Redis: client-1 gets 10 a minute on /foo and
// 5 on /bar, client-2 20 and 10, everyone else the limiter's own 2. The
// code is the in-memory code but for the constructor (and its name): there,
// keylimit.NewTokenBucket[string](keylimit.PerMinute(2)); SetKeyLimit,
// right after it, puts each key under its limit from the first request.
func ExampleTokenBucket_SetKeyLimit_tiers() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	tiers := map[string]map[string]keylimit.Limit{
		"/foo": {"client-1": keylimit.PerMinute(10), "client-2": keylimit.PerMinute(20)},
		"/bar": {"client-1": keylimit.PerMinute(5), "client-2": keylimit.PerMinute(10)},
	}
	for _, endpoint := range []string{"/foo", "/bar"} {
		perClient := func(client string) keylimit.Limit {
			return tiers[endpoint][client] // Limit{} if none: the limiter's own
		}
		lim, err := redislimit.NewTokenBucket(client, "tiers"+endpoint, keylimit.PerMinute(2))
		if err != nil {
			panic(err)
		}
		if err := lim.SetKeyLimit(perClient); err != nil {
			panic(err)
		}
		for _, c := range []string{"client-1", "client-2", "anonymous"} {
			n := 0
			for lim.Allow(c) {
				n++
			}
			fmt.Printf("%s %s: %d of %d\n", endpoint, c, n, lim.Peek(c).Limit)
			lim.Reset(c)
		}
	}
	// Output:
	// /foo client-1: 10 of 10
	// /foo client-2: 20 of 20
	// /foo anonymous: 2 of 2
	// /bar client-1: 5 of 5
	// /bar client-2: 10 of 10
	// /bar anonymous: 2 of 2
}

// 10 a minute AND 500 an hour on one API key, on Redis: keylimit.All joins
// the two limiters (on one client), so each request is one script call,
// all or nothing inside Redis. The code is the in-memory code but for the
// constructors.
func ExampleTokenBucket_all() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	perMinute, _ := redislimit.NewTokenBucket(client, "api-minute", keylimit.PerMinute(10))
	perHour, _ := redislimit.NewTokenBucket(client, "api-hour", keylimit.PerHour(500))
	lim := keylimit.All[string](perMinute, perHour)
	defer lim.Reset("api-key-1")

	for i := 1; i <= 12; i++ {
		r := lim.Take("api-key-1", 1)
		if i >= 9 {
			fmt.Printf("request %d: allowed=%v remaining=%d of %d, retry in %v\n",
				i, r.Allowed, r.Remaining, r.Limit, r.RetryAfter.Round(time.Second))
		}
	}
	fmt.Println("left this hour:", perHour.Peek("api-key-1").Remaining)
	// Output:
	// request 9: allowed=true remaining=1 of 10, retry in 0s
	// request 10: allowed=true remaining=0 of 10, retry in 0s
	// request 11: allowed=false remaining=0 of 10, retry in 6s
	// request 12: allowed=false remaining=0 of 10, retry in 6s
	// left this hour: 490
}

// An operator raises a limit during an incident, on one instance; keys
// keep what they used, in Redis, whichever instance asks next.
// A customer upgraded at run time gets its own limit on every instance that
// sets it, keeping what it used; nil puts every key back under the
// limiter's limit.
func ExampleTokenBucket_SetKeyLimit() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "plans", keylimit.PerMinute(10))
	defer lim.Reset("acme")

	lim.AllowN("acme", 10)
	fmt.Println("free:", lim.Peek("acme").Remaining, "left of", lim.LimitOf("acme"))
	_ = lim.SetKeyLimit(func(customer string) keylimit.Limit {
		if customer == "acme" {
			return keylimit.PerMinute(100)
		}
		return keylimit.Limit{} // the limiter's own
	})
	fmt.Println("upgraded:", lim.Peek("acme").Remaining, "left of", lim.LimitOf("acme"))
	_ = lim.SetKeyLimit(nil)
	fmt.Println("back:", lim.Peek("acme").Remaining, "left of", lim.LimitOf("acme"))
	// Output:
	// free: 0 left of 10/min
	// upgraded: 90 left of 100/min
	// back: 0 left of 10/min
}

func ExampleTokenBucket_SetLimit() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, _ := redislimit.NewTokenBucket(client, "incident", keylimit.PerMinute(10))
	defer lim.Reset("k")

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
