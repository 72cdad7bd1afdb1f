package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
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
// three times against a fresh partner on 127.0.0.1 behind the httplimit
// middleware: with a plain client; through a Transport with no limit of its
// own, which obeys the partner's RateLimit and Retry-After fields; and
// through a Transport paced at the partner's rate.
func retryScene(w io.Writer) error {
	fmt.Fprintf(w, "A partner allows %d requests a second. A client has %d calls to make, and on a\n", partnerRate, retryCalls)
	fmt.Fprintf(w, "429 it tries again every %v, whatever the server says.\n\n", retryEvery)

	runs := []struct {
		name string
		own  bool // the Transport gets a limit of its own
		bare bool // no Transport at all
	}{
		{"without the Transport", false, true},
		{"with the Transport, reading the partner's fields", false, false},
		{fmt.Sprintf("with the Transport, and %d/s of its own", partnerRate), true, false},
	}
	var took [3]time.Duration
	var refused [3]int64
	for i, run := range runs {
		var rt http.RoundTripper = http.DefaultTransport
		if !run.bare {
			tr := &httplimit.Transport{Clock: waitClock()}
			if run.own {
				// On the Transport's clock: the bucket's turns are waited for on it.
				lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(partnerRate).WithBurst(1), keylimit.WithClock(tr.Clock))
				if err != nil {
					return err
				}
				defer lim.Close()
				tr.Limiter = lim
			}
			rt = tr
		}
		var err error
		took[i], refused[i], err = retryLoop(&http.Client{Transport: rt})
		if err != nil {
			return err
		}
		sent := retryCalls + refused[i]
		verdict := "none refused"
		if refused[i] > 0 {
			verdict = fmt.Sprintf("%d refused with a 429: %d%% wasted", refused[i], refused[i]*100/sent)
		}
		fmt.Fprintf(w, "  %s:\n      %d calls in %v; %s sent, %s\n", run.name, retryCalls, took[i], plural(int(sent), "request"), verdict)
	}
	if took[0] <= took[1] && refused[0] > 0 {
		fmt.Fprintf(w, "\nRetrying every %v made the loop no faster than the Transport: it only sent\n", retryEvery)
		fmt.Fprintf(w, "the partner %s to refuse.\n", plural(int(refused[0]), "more request"))
	}
	fmt.Fprintln(w, "\nThe Transport reads the partner's answers: after the 5th call the RateLimit field")
	fmt.Fprintln(w, "said r=0 (none left), so it held the 6th, for every caller sharing it, until the quota")
	fmt.Fprintln(w, "was back; a 429's Retry-After does the same. With a limit of its own, it also spreads")
	fmt.Fprintln(w, "the calls over the second.")
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

// servePartner serves, on a free port of 127.0.0.1, a partner behind the
// httplimit middleware admitting partnerRate requests a second (burst
// partnerRate) per client on demoClock. It returns its URL, the count of
// requests it refused and a function that stops it.
func servePartner() (url string, refused *atomic.Int64, stop func(), err error) {
	refused = new(atomic.Int64)
	limit, err := httplimit.New(httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{quota.Bucket("second", keylimit.PerSecond(partnerRate), keylimit.WithClock(demoClock))},
		OnDecision: func(_ *http.Request, d quota.Decision) {
			if !d.Result.Allowed {
				refused.Add(1)
			}
		},
	})
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: limit(ok), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), refused, func() {
		srv.Close()
		<-served
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
