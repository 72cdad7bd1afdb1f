package redislimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// Two instances of a service share a limit of 2 reports running at once per
// tenant: what one holds, the other cannot take; an Acquire on one waits
// for a release on the other, and gets the slot.
func ExampleNewConcurrency() {
	var fleet []*redislimit.Concurrency
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer client.Close()
		lim, err := redislimit.NewConcurrency(client, "reports", 2, redislimit.WithTimeout(time.Second))
		if err != nil {
			panic(err)
		}
		defer lim.Close()
		fleet = append(fleet, lim)
	}
	a, b := fleet[0], fleet[1]

	first, r := a.TryAcquire("acme", 1)
	fmt.Println("a runs a report:", r.Allowed, "remaining", r.Remaining)
	second, r := b.TryAcquire("acme", 1)
	fmt.Println("b runs a report:", r.Allowed, "remaining", r.Remaining)
	_, r = b.TryAcquire("acme", 1)
	fmt.Println("b runs a third:", r.Allowed)

	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := b.Acquire(ctx, "acme", 1)
		fmt.Println("b's waiting report starts:", err == nil)
		p.Release()
	}()
	time.Sleep(50 * time.Millisecond)
	first.Release() // on a: b's waiter asks again within 100 ms
	<-done
	second.Release()
	fmt.Println("free once all are done:", a.Peek("acme").Remaining)
	// Output:
	// a runs a report: true remaining 1
	// b runs a report: true remaining 0
	// b runs a third: false
	// b's waiting report starts: true
	// free once all are done: 2
}
