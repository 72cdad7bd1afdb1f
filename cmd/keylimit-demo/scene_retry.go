package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
)

func init() {
	register(scene{order: 50, name: "retry", title: "A retry loop that hammers a partner, with and without httplimit.Transport", run: retryScene})
}

// Numbers of the retry scene.
const (
	partnerRate = 5                      // the partner admits 5 requests a second
	retryCalls  = 10                     // the calls the client has to make
	retryEvery  = 100 * time.Millisecond // how soon the loop tries again on a 429
)

// retryScene: a client makes 10 calls to a partner that allows 5 a second,
// and on a 429 tries again every 100 ms, whatever the server says. It runs
// three times against a fresh partner on 127.0.0.1: with a plain client;
// through a Transport with no limit of its own, which obeys the server's
// Retry-After; and through a Transport paced at the partner's rate.
func retryScene(w io.Writer) error {
	fmt.Fprintf(w, "A partner allows %d requests a second. A client has %d calls to make, and on a\n", partnerRate, retryCalls)
	fmt.Fprintf(w, "429 it tries again every %v, whatever the server says.\n\n", retryEvery)

	runs := []struct {
		name string
		own  bool // the Transport gets a limit of its own
		bare bool // no Transport at all
	}{
		{"without the Transport", false, true},
		{"with the Transport, obeying Retry-After", false, false},
		{fmt.Sprintf("with the Transport, and %d/s of its own", partnerRate), true, false},
	}
	for _, run := range runs {
		var rt http.RoundTripper = http.DefaultTransport
		if !run.bare {
			tr := &httplimit.Transport{Clock: waitClock()}
			if run.own {
				lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(partnerRate).WithBurst(1), keylimit.WithClock(demoClock))
				if err != nil {
					return err
				}
				defer lim.Close()
				tr.Limiter = lim
			}
			rt = tr
		}
		took, refused, err := retryLoop(&http.Client{Transport: rt})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-42s %d calls in %v; the partner refused %s\n", run.name+":", retryCalls, took, requests(refused))
	}
	fmt.Fprintln(w, "\nThe Transport waits for the partner's Retry-After, for every caller sharing it, and with")
	fmt.Fprintln(w, "a limit of its own it never sends what the partner would refuse.")
	return nil
}

// retryLoop makes the calls with c against a fresh partner, retrying each on
// a 429 every retryEvery, and returns how long it took and how many requests
// the partner refused.
func retryLoop(c *http.Client) (took time.Duration, refused int64, err error) {
	url, refusals, stop, err := servePartner()
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	start := demoClock.Now()
	for range retryCalls {
		for {
			resp, err := c.Get(url)
			if err != nil {
				return 0, 0, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				break
			}
			pause(retryEvery) // the misbehaviour: whatever Retry-After said
		}
	}
	c.CloseIdleConnections()
	return demoClock.Since(start).Round(100 * time.Millisecond), refusals.Load(), nil
}

// requests formats a count of requests: "1 request", "8 requests".
func requests(n int64) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%d requests", n)
}

// servePartner serves, on a free port of 127.0.0.1, a partner that admits
// partnerRate requests a second (burst partnerRate) on demoClock, and
// answers the others with 429 and Retry-After in whole seconds. It returns
// its URL, the count of requests it refused and a function that stops it.
func servePartner() (url string, refused *atomic.Int64, stop func(), err error) {
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(partnerRate), keylimit.WithClock(demoClock))
	if err != nil {
		return "", nil, nil, err
	}
	refused = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lim.Close()
		return "", nil, nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if res := lim.Take("client", 1); !res.Allowed {
			refused.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(res.RetryAfter.Seconds()))))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	})}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), refused, func() {
		srv.Shutdown(context.Background())
		lim.Close()
	}, nil
}

// waitClock is the clock the Transport waits on: demoClock, except on the
// tests' mock clock, where a wait moves the clock forward by itself (the
// scene's one client goroutine is the only one waiting), so that the test
// sees the exact numbers.
func waitClock() clock.Clock {
	if m, ok := demoClock.(*clock.Mock); ok {
		return selfAdvancing{m}
	}
	return demoClock
}

// selfAdvancing is a mock clock whose timers make the time they wait for pass.
type selfAdvancing struct{ *clock.Mock }

func (c selfAdvancing) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	pause(d)
	return t
}
