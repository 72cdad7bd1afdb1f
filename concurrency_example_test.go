package keylimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// A report endpoint that may run at most twice at once per tenant. The
// mock clock makes the estimate in RetryAfter independent of the machine.
func ExampleConcurrency() {
	lim, err := keylimit.NewConcurrency[string](2, keylimit.WithClock(clock.NewMock()))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	first, r := lim.TryAcquire("acme", 1)
	fmt.Println("acme report 1:", r)
	second, r := lim.TryAcquire("acme", 1)
	fmt.Println("acme report 2:", r)
	_, r = lim.TryAcquire("acme", 1)
	fmt.Println("acme report 3:", r) // no hold has ended yet: the estimate is a second × 1 slot / 2
	_, r = lim.TryAcquire("globex", 1)
	fmt.Println("globex report 1:", r)

	first.Release()
	first.Release() // a second Release frees nothing
	fmt.Println("acme, one report done:", lim.Peek("acme"))
	second.Release()
	// Output:
	// acme report 1: allowed: 1 of 2 left
	// acme report 2: allowed: 0 of 2 left
	// acme report 3: refused: 0 of 2 left, retry in 500ms
	// globex report 1: allowed: 1 of 2 left
	// acme, one report done: allowed: 1 of 2 left
}

// A client that lets one call at a time reach a partner's host: the
// others wait their turn, first come, first served, as long as their
// context lets them.
func ExampleConcurrency_Acquire() {
	lim, _ := keylimit.NewConcurrency[string](1)
	defer lim.Close()
	ctx := context.Background()

	first, _ := lim.Acquire(ctx, "partner.example", 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p, err := lim.Acquire(ctx, "partner.example", 1) // waits for the first
		fmt.Println("second call runs:", err)
		p.Release()
	}()
	for lim.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond) // until the second call waits
	}
	fmt.Println("first call done")
	first.Release()
	<-done

	held, _ := lim.Acquire(ctx, "partner.example", 1)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err := lim.Acquire(short, "partner.example", 1)
	fmt.Println(err)
	held.Release()
	// Output:
	// first call done
	// second call runs: <nil>
	// keylimit: acquire 1 slot: context deadline exceeded
}

// WithMaxHold: a slot its holder never releases is taken back after the
// longest hold, and logged; the holder's late Release gives back nothing.
func ExampleWithMaxHold() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // no time: the output is checked
			}
			return a
		},
	}))
	mock := clock.NewMock()
	lim, _ := keylimit.NewConcurrency[string](1, keylimit.WithClock(mock),
		keylimit.WithMaxHold(time.Minute), keylimit.WithLogger(logger))
	defer lim.Close()

	lost, _ := lim.TryAcquire("tenant-7", 1) // a goroutine that never releases
	_, r := lim.TryAcquire("tenant-7", 1)
	fmt.Println("while held:", r.Allowed)
	mock.Add(2 * time.Minute)
	p, r := lim.TryAcquire("tenant-7", 1)
	fmt.Println("two longest holds later:", r.Allowed)
	lost.Release()
	fmt.Println("after the late Release:", lim.Peek("tenant-7").Remaining, "free")
	p.Release()
	fmt.Println("taken back:", lim.Stats().Reclaimed)
	// Output:
	// while held: false
	// level=WARN msg="keylimit: slots held past the longest hold were taken back; their holders never released them" max_hold=1m0s slots=1 reclaimed_so_far=1
	// two longest holds later: true
	// after the late Release: 0 free
	// taken back: 1
}
