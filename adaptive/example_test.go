package adaptive_test

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
)

// A server that finds its concurrency from the latency of its calls: a
// backend of 8 workers, 10 ms a call, with a queue in front, so that n
// calls at once take 10 ms × ⌈n/8⌉. Gradient(1, 1000) starts at its floor,
// doubles until the queue shows, and holds the backend busy with a queue
// of at most a call (8 or 9 in flight over 8 workers); when half the
// workers are lost, the limit follows them (4 or 5). The mock clock
// makes the figures independent of the machine.
func ExampleLimiter() {
	mock := clock.NewMock()
	lim, err := adaptive.New[string](adaptive.Gradient(1, 1000), keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer lim.Close()
	serve := func(rounds, workers int) {
		for range rounds {
			var held []keylimit.Permit
			for {
				p, r := lim.TryAcquire("backend", 1)
				if !r.Allowed {
					break
				}
				held = append(held, p)
			}
			mock.Add(10 * time.Millisecond * time.Duration((len(held)+workers-1)/workers))
			for _, p := range held {
				p.Release() // a success: its latency is a sample
			}
		}
	}
	fmt.Println("start:", lim.Stats().Limit)
	serve(200, 8)
	fmt.Println("8 workers:", lim.Stats().Limit)
	serve(200, 4)
	fmt.Println("4 workers:", lim.Stats().Limit)
	// Output:
	// start: 1
	// 8 workers: 8
	// 4 workers: 5
}

// AIMD starts at its floor, doubles a busy limit after each window of 16
// samples in slow start, and cuts it by a tenth at a window with a drop.
func ExampleAIMD() {
	mock := clock.NewMock()
	lim, _ := adaptive.New[string](adaptive.AIMD(2, 10), keylimit.WithClock(mock))
	defer lim.Close()
	call := func(n int, drop bool) {
		for range n {
			p, _ := lim.TryAcquire("k", 1)
			mock.Add(10 * time.Millisecond)
			if drop {
				p.Drop() // a timeout: overload
			} else {
				p.Release()
			}
		}
	}
	fmt.Println("start:", lim.Stats().Limit)
	call(16, false)
	fmt.Println("after a window, one call at a time:", lim.Stats().Limit)
	call(16, true)
	fmt.Println("after a window of drops:", lim.Stats().Limit)
	// Output:
	// start: 2
	// after a window, one call at a time: 4
	// after a window of drops: 3
}

// Gradient's floor and ceiling bound the limit whatever the latency.
func ExampleGradient() {
	lim, _ := adaptive.New[string](adaptive.Gradient(5, 5))
	defer lim.Close()
	fmt.Println(lim.Stats().Limit)
	// Output: 5
}

// Drop ends a call that failed from overload: the permit's slots are given
// back, and the limiter learns.
func Example_drop() {
	lim, _ := adaptive.New[string](adaptive.AIMD(2, 2))
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
// adaptive limiter sheds sheddable requests first and critical ones last.
func ExampleLimiter_Acquire() {
	lim, _ := adaptive.New[string](adaptive.AIMD(8, 16), keylimit.WithClock(clock.NewMock()))
	defer lim.Close()
	ctx := context.Background()
	// The limit is 8: sheddable work may fill 6 of it, default 8, critical
	// 16 (twice the limit, the hard bound; here the ceiling too).
	for _, c := range []keylimit.Criticality{keylimit.Sheddable, keylimit.Default, keylimit.Critical} {
		n := 0
		cctx, cancel := context.WithCancel(keylimit.WithCriticality(ctx, c))
		go func() { // gives up as soon as an Acquire has to wait
			for lim.Stats().Waiting == 0 && cctx.Err() == nil {
				runtime.Gosched()
			}
			cancel()
		}()
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
	// true held after this criticality: 8
	// shed: 1 1 1
}

// New refuses a floor below 1 or a ceiling below the floor.
func ExampleNew() {
	_, err := adaptive.New[string](adaptive.Gradient(10, 5))
	fmt.Println(err)
	// Output: adaptive: ceiling 5 is below its floor 10
}
