package keylimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// A server that finds each tenant's concurrency from the latency of its
// calls. Gradient(4, 100) starts at the geometric mean, 20; on the mock
// clock every call of a busy window takes 10 ms, then 50 ms, and the
// limit follows.
func ExampleAdaptive() {
	mock := clock.NewMock()
	lim, err := keylimit.NewAdaptive[string](keylimit.Gradient(4, 100), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	fmt.Println("start:", lim.Stats().Limit)

	serve := func(rounds int, latency time.Duration) {
		for range rounds {
			var held []keylimit.Permit
			for {
				p, r := lim.TryAcquire("acme", 1)
				if !r.Allowed {
					break
				}
				held = append(held, p)
			}
			mock.Add(latency)
			for _, p := range held {
				p.Release() // a success: its latency is a sample
			}
		}
	}
	serve(10, 10*time.Millisecond)
	fmt.Println("at 10 ms:", lim.Stats().Limit, lim.Peek("acme").Limit)
	serve(10, 50*time.Millisecond)
	fmt.Println("at 50 ms:", lim.Stats().Limit, lim.Peek("acme").Limit)
	// Output:
	// start: 20
	// at 10 ms: 35 35
	// at 50 ms: 15 15
}

// AIMD grows a busy limit by one a window of 16 samples and cuts it by a
// tenth at each window with a drop.
func ExampleAIMD() {
	lim, _ := keylimit.NewAdaptive[string](keylimit.AIMD(1, 10), keylimit.WithClock(clock.NewMock()))
	defer lim.Close()
	fmt.Println("start:", lim.Stats().Limit) // √(1×10), rounded down
	for range 16 {
		p, _ := lim.TryAcquire("k", 1)
		p.Drop() // a timeout: overload
	}
	fmt.Println("after 16 drops:", lim.Stats().Limit)
	// Output:
	// start: 3
	// after 16 drops: 2
}

// Gradient's floor and ceiling bound the limit whatever the latency.
func ExampleGradient() {
	lim, _ := keylimit.NewAdaptive[string](keylimit.Gradient(5, 5))
	defer lim.Close()
	fmt.Println(lim.Stats().Limit)
	// Output: 5
}

// Drop ends a call that failed from overload: the permit's slots are given
// back, and the limiter learns.
func ExamplePermit_Drop() {
	lim, _ := keylimit.NewAdaptive[string](keylimit.AIMD(2, 2))
	defer lim.Close()
	p, r := lim.TryAcquire("partner", 1)
	fmt.Println(r.Allowed, lim.Peek("partner").Remaining)
	p.Drop() // the partner timed out
	fmt.Println(lim.Peek("partner").Remaining)
	// Output:
	// true 1
	// 2
}

// A request's criticality travels in its context; under pressure an
// Adaptive sheds sheddable requests first and critical ones last.
func ExampleWithCriticality() {
	lim, _ := keylimit.NewAdaptive[string](keylimit.AIMD(4, 16), keylimit.WithClock(clock.NewMock()))
	defer lim.Close()
	ctx := context.Background()
	// The limit is 8: sheddable work may fill 6 of it, default 8, critical 10.
	for _, c := range []keylimit.Criticality{keylimit.Sheddable, keylimit.Default, keylimit.Critical} {
		n := 0
		cctx, cancel := context.WithTimeout(keylimit.WithCriticality(ctx, c), time.Millisecond)
		for {
			if _, err := lim.Acquire(cctx, "batch", 1); err != nil {
				break
			}
			n++
		}
		cancel()
		fmt.Println(keylimit.CriticalityOf(cctx) == c, "held after this criticality:", n)
	}
	st := lim.Stats()
	fmt.Println("shed:", st.Shed[keylimit.Sheddable], st.Shed[keylimit.Default], st.Shed[keylimit.Critical])
	// Output:
	// true held after this criticality: 6
	// true held after this criticality: 2
	// true held after this criticality: 2
	// shed: 1 1 1
}

// The zero value of Criticality is Default, what a context without one
// carries.
func ExampleCriticalityOf() {
	fmt.Println(keylimit.CriticalityOf(context.Background()) == keylimit.Default)
	// Output: true
}

// NewAdaptive refuses a floor below 1 or a ceiling below the floor.
func ExampleNewAdaptive() {
	_, err := keylimit.NewAdaptive[string](keylimit.Gradient(10, 5))
	fmt.Println(err)
	// Output: keylimit: adaptive ceiling 5 is below its floor 10
}
