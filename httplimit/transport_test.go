package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// TestTransportKeepsFiftyGoroutinesUnderTheServerLimit: a partner enforces
// 10/s (burst 10). 50 goroutines, one request each, through one Transport
// paced at 10/s get no 429, and the server sees at most 10 in any second of
// its clock. The same 50 requests without the Transport, in the same
// instant, meet a storm of 429s: 40 of them.
func TestTransportKeepsFiftyGoroutinesUnderTheServerLimit(t *testing.T) {
	const goroutines, rounds, total = 50, 1, 50
	serverLimit := keylimit.PerSecond(10)

	t.Run("through the Transport", func(t *testing.T) {
		mock := clock.NewMock()
		srv := limitedServer(t, mock, serverLimit)
		tr := &httplimit.Transport{
			Limiter: newBucket(t, keylimit.PerSecond(10).WithBurst(1), mock), // even pacing
			Clock:   mock,
		}
		c := &http.Client{Transport: tr}

		var got *tally
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			got = storm(c, srv.URL, goroutines, rounds)
		}()
		done := func() bool {
			select {
			case <-finished:
				return true
			default:
				return false
			}
		}
		// Move the clock a token at a time, once the request the limit lets
		// through at this instant has arrived: none is in flight while the
		// clock moves, so the server sees each at the time it was sent.
		for want := 1; ; {
			waitUpTo(time.Second, func() bool { return srv.count() >= want || done() })
			if done() {
				break
			}
			want = srv.count() + 1 // before the clock moves and lets it out
			mock.Add(100 * ms)
		}
		t.Logf("through the Transport: %v answers by status, in %v of mock time", got.byStatus, mock.Now().Sub(srv.t0))
		require.Empty(t, got.errs)
		require.Equal(t, map[int]int{200: total}, got.byStatus, "no 429 through the Transport")

		perSecond := map[time.Duration]int{}
		for _, at := range srv.times() {
			perSecond[at.Truncate(s)]++
		}
		for sec, n := range perSecond {
			require.LessOrEqual(t, n, 10, "the server saw %d requests in second %v", n, sec)
		}
		require.GreaterOrEqual(t, len(perSecond), total/10, "%d requests at 10/s take %d seconds at least", total, total/10)
	})

	t.Run("without the Transport", func(t *testing.T) {
		mock := clock.NewMock()
		srv := limitedServer(t, mock, serverLimit)
		got := storm(&http.Client{}, srv.URL, goroutines, rounds)
		t.Logf("without the Transport: %v answers by status", got.byStatus)
		require.Empty(t, got.errs)
		require.Equal(t, map[int]int{200: 10, 429: total - 10}, got.byStatus, "the server's burst, then a storm of 429s")
	})
}

// TestTransportPausesTheHostForEveryCaller: the partner answers the first
// request with 429 and Retry-After: 2. The Transport sends nothing more to
// that host until 2 s have passed, from any of 20 goroutines, then resumes;
// another host is not paused.
func TestTransportPausesTheHostForEveryCaller(t *testing.T) {
	clk := newCountingClock()
	mock := clk.Mock
	srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests, "Retry-After", "2"))
	other := newPartner(t, mock, refuseFirst(0, 0))
	c := &http.Client{Transport: &httplimit.Transport{Clock: clk}}

	resp, err := fetch(c, context.Background(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "no retries: the 429 goes back to the caller")

	const callers = 20
	var after tally // the callers' answers, asserted once they are all back
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { after.add(fetch(c, context.Background(), srv.URL)) })
	}
	resp, err = fetch(c, context.Background(), other.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "another host is not paused")

	clk.asleep(t, callers) // each waits for the pause to end, on one timer
	mock.Add(1999 * ms)
	time.Sleep(50 * time.Millisecond) // time for anything sent too early to arrive
	require.Equal(t, 1, srv.count(), "nothing sent to the paused host before 2 s")

	mock.Add(1 * ms)
	waitFor(t, "the callers to resume", func() bool { return srv.count() == 1+callers })
	wg.Wait()
	require.Empty(t, after.errs)
	require.Equal(t, map[int]int{200: callers}, after.byStatus, "after the pause")
	for _, a := range srv.seen()[1:] {
		require.Equal(t, 2*s, a.at, "resumed at the end of the pause")
	}
}

// TestTransportRateLimitZeroPausesOn200: a 200 whose RateLimit field says
// none are left for 3 s pauses the key too. A request whose deadline comes
// before fails at once and says until when the server paused it.
func TestTransportRateLimitZeroPausesOn200(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, func(n int, _ *http.Request, h http.Header) int {
		h.Set("RateLimit", `"minute";r=0;t=3`)
		return http.StatusOK
	})
	c := &http.Client{Transport: &httplimit.Transport{Clock: autoClock{mock}, Key: func(*http.Request) (string, error) { return "partner", nil }}}
	_, err := fetch(c, context.Background(), srv.URL)
	require.NoError(t, err)

	ctx, cancel := mock.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = fetch(c, ctx, srv.URL)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	te := transportError(t, err)
	require.Equal(t, mock.Now().Add(3*s), te.Until)
	require.ErrorContains(t, err, `httplimit: waiting to send to "partner", paused by the server until 1970-01-01T00:00:03Z: httplimit: waiting 3s would outlast the context deadline, 1s away`)
	require.Equal(t, 1, srv.count())
}

// TestTransportDeadline: a wait that would outlast the request's deadline
// fails at once, without sleeping, says how long it would have been, takes
// no token, and closes the request's body.
func TestTransportDeadline(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(0, 0))
	lim := newBucket(t, keylimit.PerSecond(1), mock)
	c := &http.Client{Transport: &httplimit.Transport{Clock: autoClock{mock}, Limiter: lim}}
	_, err := fetch(c, context.Background(), srv.URL)
	require.NoError(t, err)

	ctx, cancel := mock.WithTimeout(context.Background(), 500*ms)
	defer cancel()
	body := &closeTracker{Reader: strings.NewReader("payload")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, body)
	require.NoError(t, err)
	t0 := mock.Now()
	_, err = c.Do(req)
	require.Equal(t, t0, mock.Now(), "no sleep")
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	te := transportError(t, err)
	require.Equal(t, srv.Listener.Addr().String(), te.Key, "the host is the key")
	require.Zero(t, te.Retries)
	require.Zero(t, te.StatusCode)
	require.True(t, te.Until.IsZero())
	require.ErrorContains(t, err, `httplimit: waiting to send to "`+te.Key+`": keylimit: waiting 1s for 1 event would outlast the context deadline, 500ms away`)
	require.True(t, body.closed.Load(), "RoundTrip closes the body of a request it does not send")
	require.Equal(t, 1, srv.count())

	mock.Add(1 * s)
	require.Equal(t, 1, lim.Peek(te.Key).Remaining, "the failed wait took no token")
}

// TestTransportClientTimeout: http.Client.Timeout is a deadline the
// Transport sees, so a wait longer than it fails at once.
func TestTransportClientTimeout(t *testing.T) {
	srv := newPartner(t, clock.NewMock(), refuseFirst(0, 0))
	lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(1))
	require.NoError(t, err)
	defer lim.Close()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &httplimit.Transport{Limiter: lim}}
	_, err = fetch(c, context.Background(), srv.URL)
	require.NoError(t, err)
	_, err = fetch(c, context.Background(), srv.URL)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline, "a wait of about a minute is refused at once")
	require.Equal(t, 1, srv.count())
}

// TestTransportCancelDuringWait: a request waiting for its token, or for the
// end of a server's pause, returns as soon as its context is cancelled, with
// the context's error, and takes no token.
func TestTransportCancelDuringWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(int, *http.Request, http.Header) int
	}{
		{"waiting for a token", refuseFirst(0, 0)},
		{"waiting out a server's pause", refuseFirst(1, http.StatusServiceUnavailable, "Retry-After", "60")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newCountingClock()
			mock := clk.Mock
			srv := newPartner(t, mock, tc.script)
			lim := newBucket(t, keylimit.PerSecond(1), clk)
			c := &http.Client{Transport: &httplimit.Transport{Clock: clk, Limiter: lim}}
			_, err := fetch(c, context.Background(), srv.URL)
			require.NoError(t, err)
			key := srv.Listener.Addr().String()

			mock.Add(500 * ms)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error)
			go func() {
				_, err := fetch(c, ctx, srv.URL)
				errc <- err
			}()
			clk.asleep(t, 1)
			cancel()
			select {
			case err := <-errc:
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorContains(t, err, "httplimit: waiting to send to")
			case <-time.After(5 * time.Second):
				require.FailNow(t, "a cancelled wait did not return")
			}
			mock.Add(500 * ms)
			require.Equal(t, 1, lim.Peek(key).Remaining, "the cancelled wait took no token")
			require.Equal(t, 1, srv.count())
		})
	}
}

// TestTransportRetriesWithJitteredBackoff: a GET refused twice with 503 and
// no hint is retried after 100 ms then 200 ms of nominal backoff, jittered
// by the injected random number: 0.5 gives 75 ms and 150 ms.
func TestTransportRetriesWithJitteredBackoff(t *testing.T) {
	for _, tc := range []struct {
		rnd  float64
		want []time.Duration
	}{
		{0, []time.Duration{0, 50 * ms, 150 * ms}},
		{0.5, []time.Duration{0, 75 * ms, 225 * ms}},
	} {
		t.Run(fmt.Sprint(tc.rnd), func(t *testing.T) {
			mock := clock.NewMock()
			srv := newPartner(t, mock, refuseFirst(2, http.StatusServiceUnavailable))
			rec := &recorder{}
			c := &http.Client{Transport: retrying(mock, tc.rnd, rec)}
			resp, err := fetch(c, context.Background(), srv.URL)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, tc.want, srv.times())
			require.Equal(t, []bool{true, true, true}, rec.closed(), "the retried answers are closed by the Transport, the last by the caller")
		})
	}
}

// TestTransportRetryWaitsForTheServerPause: a 429 with Retry-After: 1 is
// retried 1 s later plus the jittered backoff, so that clients refused
// together do not all return at the end of the pause.
func TestTransportRetryWaitsForTheServerPause(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests, "Retry-After", "1"))
	c := &http.Client{Transport: retrying(mock, 0, nil)}
	resp, err := fetch(c, context.Background(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []time.Duration{0, 1050 * ms}, srv.times())
}

// TestTransportRetriesOnlyWhatIsSafe: idempotent methods, and others marked
// so by an Idempotency-Key or X-Idempotency-Key field (one with a nil value
// marks the request without being sent, as for net/http's Transport), with
// a body that can be replayed.
func TestTransportRetriesOnlyWhatIsSafe(t *testing.T) {
	payload := func() io.Reader { return strings.NewReader("payload") }
	opaque := func() io.Reader { return io.MultiReader(strings.NewReader("payload")) } // no GetBody
	key := func(name string, value []string) func(http.Header) {
		return func(h http.Header) { h[name] = value }
	}
	marked := key("Idempotency-Key", nil)
	for _, tc := range []struct {
		name    string
		method  string
		body    func() io.Reader
		mark    func(http.Header)
		retried bool
	}{
		{"GET", http.MethodGet, nil, nil, true},
		{"HEAD", http.MethodHead, nil, nil, true},
		{"OPTIONS", http.MethodOptions, nil, nil, true},
		{"DELETE", http.MethodDelete, nil, nil, true},
		{"PUT with a replayable body", http.MethodPut, payload, nil, true},
		{"PUT with a body it cannot replay", http.MethodPut, opaque, nil, false},
		{"POST", http.MethodPost, payload, nil, false},
		{"PATCH", http.MethodPatch, payload, nil, false},
		{"POST marked by a nil Idempotency-Key", http.MethodPost, payload, marked, true},
		{"POST with Idempotency-Key", http.MethodPost, payload, key("Idempotency-Key", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}), true},
		{"POST with X-Idempotency-Key", http.MethodPost, payload, key("X-Idempotency-Key", []string{"42"}), true},
		{"POST marked, body it cannot replay", http.MethodPost, opaque, marked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := clock.NewMock()
			srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests))
			c := &http.Client{Transport: retrying(mock, 0, nil)}
			var body io.Reader
			if tc.body != nil {
				body = tc.body()
			}
			req, err := http.NewRequestWithContext(context.Background(), tc.method, srv.URL, body)
			require.NoError(t, err)
			if tc.mark != nil {
				tc.mark(req.Header)
			}
			resp, err := c.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			seen := srv.seen()
			if !tc.retried {
				require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the 429 goes back to the caller")
				require.Len(t, seen, 1)
				return
			}
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Len(t, seen, 2)
			for _, a := range seen {
				require.Equal(t, tc.method, a.method)
				if tc.body != nil {
					require.Equal(t, "payload", a.body, "the retry sends the whole body again")
				}
			}
		})
	}
}

// TestTransportReturnsTheLastAnswer: a server that always refuses gets the
// request 1 + Retries times; then the Transport returns its last answer,
// with a nil error, as an http.RoundTripper must, its body unread: the
// refusal's status tells the caller that retries ran out. The answers it
// replaced are closed.
func TestTransportReturnsTheLastAnswer(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(math.MaxInt, http.StatusTooManyRequests, "Retry-After", "1"))
	rec := &recorder{}
	var waits []httplimit.Wait
	tr := retrying(mock, 0, rec)
	tr.OnWait = func(_ *http.Request, w httplimit.Wait) { waits = append(waits, w) }
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, []bool{true, true, true, false}, rec.closed(), "the last answer is the caller's to read and close")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "answer 3\n", string(body))
	// Each retry waits 1 s of pause, then 50, 100, 200 ms of backoff (rand 0).
	require.Equal(t, []time.Duration{0, 1050 * ms, 2150 * ms, 3350 * ms}, srv.times())
	require.Equal(t, []httplimit.Wait{{Key: srv.Listener.Addr().String(), Waited: 3350 * ms, Paused: true, Retries: 3}}, waits)
}

// TestTransportRetryWouldOutlastDeadline: when the wait before a retry
// would outlast the deadline, the Transport returns the refusal at once,
// its body unread, rather than an error: it has an answer.
func TestTransportRetryWouldOutlastDeadline(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests, "Retry-After", "1"))
	c := &http.Client{Transport: retrying(mock, 0, nil)}
	ctx, cancel := mock.WithTimeout(context.Background(), 500*ms)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "answer 0\n", string(body))
	require.Equal(t, 1, srv.count())
	require.Equal(t, time.Unix(0, 0), mock.Now(), "no sleep")
}

// TestTransportWaitFailsBeforeARetry: a wait before a retry that fails
// after the refusal was read (here the context is cancelled during the
// backoff) returns a TransportError that says what the last answer was.
func TestTransportWaitFailsBeforeARetry(t *testing.T) {
	clk := newCountingClock()
	srv := newPartner(t, clk.Mock, refuseFirst(1, http.StatusServiceUnavailable, "Retry-After", "2"))
	tr := retrying(clk.Mock, 0, nil)
	tr.Clock = clk
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := fetch(&http.Client{Transport: tr}, ctx, srv.URL)
		errc <- err
	}()
	clk.asleep(t, 1)
	cancel()
	err := <-errc
	require.ErrorIs(t, err, context.Canceled)
	te := transportError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, te.StatusCode)
	require.Zero(t, te.Retries)
	require.ErrorContains(t, err, `httplimit: waiting to send to "`+te.Key+`" again after 503 Service Unavailable (0 retries so far), paused by the server until 1970-01-01T00:00:02Z: `)
	require.Equal(t, 1, srv.count())
}

// TestTransportBaseErrorsAreNotRetried: a refused connection is the
// caller's to handle; the Transport does not retry it.
func TestTransportBaseErrorsAreNotRetried(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(0, 0))
	url := srv.URL
	srv.Close()
	var calls atomic.Int32
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		calls.Add(1)
		return http.DefaultTransport.RoundTrip(req)
	})
	c := &http.Client{Transport: retrying(mock, 0, base)}
	_, err := fetch(c, context.Background(), url)
	require.Error(t, err)
	require.EqualValues(t, 1, calls.Load())
}

// TestTransportKeyFunc: pauses and limits follow the Key function, here an
// API key header: one paused key does not pause another on the same host,
// and a request without the header is not sent.
func TestTransportKeyFunc(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, func(_ int, r *http.Request, h http.Header) int {
		if r.Header.Get("X-Api-Key") == "alice" {
			h.Set("Retry-After", "30")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	c := &http.Client{Transport: &httplimit.Transport{Clock: autoClock{mock}, Key: httplimit.Header("X-Api-Key")}}
	send := func(key string, ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Api-Key", key)
		return c.Do(req)
	}
	resp, err := send("alice", context.Background())
	require.NoError(t, err)
	resp.Body.Close()
	ctx, cancel := mock.WithTimeout(context.Background(), 10*s)
	defer cancel()
	_, err = send("alice", ctx)
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorContains(t, err, `waiting to send to "alice", paused by the server until 1970-01-01T00:00:30Z`)
	resp, err = send("bob", ctx)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A request the KeyFunc cannot key is not sent.
	body := &closeTracker{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
	_, err = c.Do(req)
	require.ErrorIs(t, err, quota.ErrNoKey)
	require.True(t, body.closed.Load(), "RoundTrip closes the body of a request it does not send")
	require.Equal(t, 2, srv.count())
}

// TestTransportCloseIdleConnections reaches Base.
func TestTransportCloseIdleConnections(t *testing.T) {
	base := &idleCloser{}
	(&http.Client{Transport: &httplimit.Transport{Base: base}}).CloseIdleConnections()
	require.True(t, base.closed)
	(&httplimit.Transport{Base: roundTripFunc(nil)}).CloseIdleConnections() // no such method: nothing
}

// TestTransportConcurrentPausesAndRetries hammers one Transport from 30
// goroutines over three hosts whose servers refuse every 7th request with
// Retry-After: 1, under the race detector: every request ends in a 200.
func TestTransportConcurrentPausesAndRetries(t *testing.T) {
	mock := clock.NewMock()
	var servers []*partner
	var refusals atomic.Int32
	for range 3 {
		servers = append(servers, newPartner(t, mock, func(n int, _ *http.Request, h http.Header) int {
			if n%7 == 6 {
				refusals.Add(1)
				h.Set("Retry-After", "1")
				return http.StatusTooManyRequests
			}
			return http.StatusOK
		}))
	}
	c := &http.Client{Transport: &httplimit.Transport{Clock: mock, Retries: 20, Backoff: 10 * ms}}
	var got tally // asserted once every goroutine is done
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Go(func() {
			for i := range 5 {
				got.add(fetch(c, context.Background(), servers[(g+i)%3].URL))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// The pauses and backoffs end as mock time passes, 50 ms of it every
	// millisecond.
	for {
		select {
		case <-done:
			t.Logf("150 requests, %d refusals retried", refusals.Load())
			require.Empty(t, got.errs)
			require.Equal(t, map[int]int{200: 150}, got.byStatus, "every request succeeds in the end")
			require.Positive(t, refusals.Load())
			return
		case <-time.After(time.Millisecond):
			mock.Add(50 * ms)
		}
	}
}

// TestTransportServesWaitersInArrivalOrder is issue 14's Transport: 50
// goroutines through one Transport keyed by host, each started once the one
// before is queued, wait their turns at a 10/s bucket (burst 1) and reach
// the server in the order they arrived, one every 100 ms, each after one
// sleep. A request whose deadline comes before its turn fails at once with
// the deadline's error and takes nothing: the request after the 50 is
// served at 5 s, the turn it would have had otherwise.
func TestTransportServesWaitersInArrivalOrder(t *testing.T) {
	const waiters = 50
	clk := newCountingClock()
	mock := clk.Mock
	var order []string // X-Seq of each arrival; under srv's lock
	srv := newPartner(t, mock, func(_ int, r *http.Request, _ http.Header) int {
		order = append(order, r.Header.Get("X-Seq"))
		return http.StatusOK
	})
	c := &http.Client{Transport: &httplimit.Transport{
		Limiter: newBucket(t, keylimit.PerSecond(10).WithBurst(1), clk),
		Clock:   clk,
	}}
	send := func(ctx context.Context, seq int) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Seq", strconv.Itoa(seq))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	var got tally // asserted once every goroutine is back
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() { got.add(send(context.Background(), i)) })
		if i == 0 {
			waitFor(t, "the first request, which needs no turn", func() bool { return srv.count() == 1 })
			continue
		}
		clk.asleep(t, i) // goroutine i is queued: it reserved its turn and sleeps
	}

	// Its turn would be 5 s away; its deadline is 1 s away.
	ctx, cancel := mock.WithTimeout(context.Background(), time.Second)
	errc := make(chan error, 1)
	go func() { _, err := send(ctx, -1); errc <- err }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "a request whose turn comes after its deadline did not fail at once")
	}
	cancel()
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "keylimit: waiting 5s for 1 event would outlast the context deadline, 1s away")
	require.EqualValues(t, waiters-1, clk.timers.Load(), "it failed at once, without a sleep")

	for i := 1; i < waiters; i++ {
		mock.Add(100 * ms)
		waitFor(t, fmt.Sprintf("request %d", i), func() bool { return srv.count() == i+1 })
	}
	wg.Wait()
	require.Empty(t, got.errs)
	require.Equal(t, map[int]int{200: waiters}, got.byStatus)
	var want []string
	var wantTimes []time.Duration
	for i := range waiters {
		want = append(want, strconv.Itoa(i))
		wantTimes = append(wantTimes, time.Duration(i)*100*ms)
	}
	srv.mu.Lock()
	arrived := slices.Clone(order)
	srv.mu.Unlock()
	require.Equal(t, want, arrived, "served in arrival order")
	require.Equal(t, wantTimes, srv.times(), "one every 100 ms")
	require.EqualValues(t, waiters-1, clk.timers.Load(), "one sleep each")

	// The failed request took no turn: the next is served at 5 s.
	go func() {
		_, err := send(context.Background(), waiters)
		errc <- err
	}()
	clk.asleep(t, waiters)
	mock.Add(100 * ms)
	require.NoError(t, <-errc)
	require.Equal(t, 5*s, srv.times()[waiters])
}

// TestTransportRefused: with Refused saying so, a GitHub-style 403 with
// Retry-After pauses the key and is retried like a 429; without it, a 403
// is an answer like any other.
func TestTransportRefused(t *testing.T) {
	github := func(r *http.Response) bool {
		return r.StatusCode == 429 || r.StatusCode == 503 || r.StatusCode == 403 && r.Header.Get("Retry-After") != ""
	}
	for _, tc := range []struct {
		name    string
		refused func(*http.Response) bool
		status  int
		times   []time.Duration
	}{
		{"Refused: 403 with Retry-After", github, http.StatusOK, []time.Duration{0, 2050 * ms}},
		{"default: 429 and 503 only", nil, http.StatusForbidden, []time.Duration{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := clock.NewMock()
			srv := newPartner(t, mock, refuseFirst(1, http.StatusForbidden, "Retry-After", "2"))
			tr := retrying(mock, 0, nil)
			tr.Refused = tc.refused
			resp, err := fetch(&http.Client{Transport: tr}, context.Background(), srv.URL)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.times, srv.times())
		})
	}

	// A 429 that Refused does not call a refusal is neither retried nor a
	// pause, unless its RateLimit says r=0.
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests, "Retry-After", "2"))
	tr := retrying(mock, 0, nil)
	tr.Refused = func(*http.Response) bool { return false }
	resp, err := fetch(&http.Client{Transport: tr}, context.Background(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	resp, err = fetch(&http.Client{Transport: tr}, context.Background(), srv.URL)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []time.Duration{0, 0}, srv.times(), "no pause")
}

// TestTransportPassesTheContext: the Limiter is asked under the request's
// context (issue 15), and a request whose context has ended asks nothing.
func TestTransportPassesTheContext(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(0, 0))
	lim := &contextLimiter{}
	c := &http.Client{Transport: &httplimit.Transport{Limiter: lim, Clock: mock}}
	ctx := context.WithValue(context.Background(), ctxMark{}, "request 1")
	_, err := fetch(c, ctx, srv.URL)
	require.NoError(t, err)
	require.Equal(t, []any{"request 1"}, lim.marks())

	ended, cancel := context.WithCancel(context.WithValue(context.Background(), ctxMark{}, "request 2"))
	cancel()
	_, err = fetch(c, ended, srv.URL)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "httplimit: waiting to send to")
	require.Equal(t, []any{"request 1"}, lim.marks(), "a request whose context ended costs the limiter nothing")
	require.Equal(t, 1, srv.count())
}

// TestTransportPauseDuringTurn: a pause the server began while a request
// waited for its turn at the Limiter is obeyed: the request, its turn
// taken, waits for the pause's end before it is sent.
func TestTransportPauseDuringTurn(t *testing.T) {
	clk := newCountingClock()
	mock := clk.Mock
	t0 := mock.Now()
	release := make(chan struct{})
	var arrivals sync.Map // request number → mock time of arrival
	var n atomic.Int32
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n.Add(1)
		arrivals.Store(i, mock.Now().Sub(t0))
		if i == 1 { // answered once the second request is queued
			<-release
			w.Header().Set("RateLimit", `"default";r=0;t=3`)
		}
	}))
	var waits []httplimit.Wait // under waitsMu
	var waitsMu sync.Mutex
	c := &http.Client{Transport: &httplimit.Transport{
		Limiter: newBucket(t, keylimit.PerSecond(1), clk),
		Clock:   clk,
		OnWait: func(_ *http.Request, w httplimit.Wait) {
			waitsMu.Lock()
			waits = append(waits, w)
			waitsMu.Unlock()
		},
	}}
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := fetch(c, context.Background(), srv.URL); first <- err }()
	waitFor(t, "the first request at the server", func() bool { return n.Load() == 1 })
	go func() { _, err := fetch(c, context.Background(), srv.URL); second <- err }()
	clk.asleep(t, 1) // the second waits for its turn, 1 s away

	close(release) // the first's answer pauses the key until 3 s
	require.NoError(t, <-first)
	mock.Add(s)      // the second's turn: the pause is still on
	clk.asleep(t, 2) // it waits for the pause now
	require.EqualValues(t, 1, n.Load(), "nothing sent into the pause")
	mock.Add(2 * s)
	require.NoError(t, <-second)
	at, _ := arrivals.Load(int32(2))
	require.Equal(t, 3*s, at, "sent when the pause ended")
	waitsMu.Lock()
	defer waitsMu.Unlock()
	require.Len(t, waits, 2)
	require.Equal(t, httplimit.Wait{Key: srv.Listener.Addr().String(), Waited: 3 * s, Paused: true}, waits[1])
}

// TestTransportOnWait: OnWait sees every request that has a key, once, as
// RoundTrip returns: what it waited, whether for a server's pause, its
// retries, and the error of a wait that failed. A request without a key is
// not seen.
func TestTransportOnWait(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, refuseFirst(1, http.StatusTooManyRequests, "Retry-After", "2"))
	var waits []httplimit.Wait
	tr := retrying(mock, 0, nil)
	tr.Retries = 0
	tr.Key = httplimit.Header("X-Api-Key")
	tr.OnWait = func(_ *http.Request, w httplimit.Wait) { waits = append(waits, w) }
	c := &http.Client{Transport: tr}
	send := func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, send(context.Background(), "alice")) // 429: paused for 2 s
	ctx, cancel := mock.WithTimeout(context.Background(), time.Second)
	err := send(ctx, "alice") // cannot wait 2 s
	cancel()
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)
	require.NoError(t, send(context.Background(), "alice")) // waits out the pause
	require.ErrorIs(t, send(context.Background(), ""), quota.ErrNoKey)

	require.Len(t, waits, 3)
	require.Equal(t, httplimit.Wait{Key: "alice"}, waits[0])
	require.Equal(t, "alice", waits[1].Key)
	require.Zero(t, waits[1].Waited)
	require.False(t, waits[1].Paused, "it did not wait")
	require.ErrorIs(t, waits[1].Err, keylimit.ErrWouldExceedDeadline)
	require.ErrorIs(t, err, waits[1].Err, "the TransportError's Err")
	require.Equal(t, httplimit.Wait{Key: "alice", Waited: 2 * s, Paused: true}, waits[2])
}

// TestTransportMaxPaused: past MaxPaused keys paused at once, the Transport
// forgets the pauses that end first, down to the cap less an eighth, and
// counts them; the others hold.
func TestTransportMaxPaused(t *testing.T) {
	mock := clock.NewMock()
	var sent []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		key := r.Header.Get("X-Api-Key")
		sent = append(sent, key)
		n, _ := strconv.Atoi(key)
		h := http.Header{"Retry-After": {strconv.Itoa(100 + n)}} // key 0 ends first
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody}, nil
	})
	dropped := 0 // the requests' Wait.DroppedPauses, summed
	tr := &httplimit.Transport{Base: base, Key: httplimit.Header("X-Api-Key"), Clock: mock, MaxPaused: 8,
		OnWait: func(_ *http.Request, w httplimit.Wait) { dropped += w.DroppedPauses }}
	send := func(ctx context.Context, key int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://partner.test/", nil)
		require.NoError(t, err)
		req.Header.Set("X-Api-Key", strconv.Itoa(key))
		_, err = tr.RoundTrip(req)
		return err
	}
	for key := range 9 {
		require.NoError(t, send(context.Background(), key))
	}
	require.Equal(t, 2, dropped, "9 pauses, down to 7")
	ctx, cancel := mock.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for key := 2; key < 9; key++ {
		err := send(ctx, key)
		require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline, "key %d is still paused", key)
		require.Equal(t, mock.Now().Add(time.Duration(100+key)*s), transportError(t, err).Until)
	}
	require.NoError(t, send(ctx, 0), "the pauses that ended first were forgotten")
	require.NoError(t, send(ctx, 1))
	require.Equal(t, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "0", "1"}, sent)
}
