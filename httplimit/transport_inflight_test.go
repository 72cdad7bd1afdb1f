package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/stretchr/testify/require"
)

// slowPartner is a server whose requests each run until the test lets one
// of them finish (finish), and which counts the requests running at once.
// Each answer's head is sent as the request arrives, its body as it ends.
type slowPartner struct {
	url    string
	done   chan struct{} // a request ends when it receives from done
	mu     sync.Mutex
	order  []string // X-Seq of each arrival; protected by mu
	now    int      // requests running; protected by mu
	most   int      // the most requests running at once; protected by mu
	status atomic.Int32
}

func newSlowPartner(t *testing.T) *slowPartner {
	p := &slowPartner{done: make(chan struct{})}
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.order = append(p.order, r.Header.Get("X-Seq"))
		p.now++
		p.most = max(p.most, p.now)
		p.mu.Unlock()
		// The answer's head goes out at once, its body when the request
		// ends: a client's request is in flight until it has read the body.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-p.done:
		case <-r.Context().Done():
		}
		p.mu.Lock()
		p.now--
		p.mu.Unlock()
		fmt.Fprintln(w, "report ready")
	}))
	// The server's Close waits for its handlers: end those still running.
	t.Cleanup(func() { close(p.done) })
	p.url = srv.URL
	return p
}

// finish lets one running request end.
func (p *slowPartner) finish() { p.done <- struct{}{} }

func (p *slowPartner) arrived() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.order)
}

func (p *slowPartner) running() (now, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now, p.most
}

// sendSeq sends a GET to url through c, marked X-Seq: seq, and reads its
// answer to the end and closes it. It asserts nothing.
func sendSeq(c *http.Client, ctx context.Context, url string, seq int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Seq", strconv.Itoa(seq))
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func newConcurrency(t *testing.T, n int, opts ...keylimit.Option) *keylimit.Concurrency[string] {
	t.Helper()
	lim, err := keylimit.NewConcurrency[string](n, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	return lim
}

// 20 concurrent requests against a cap of 3: the server never sees more
// than 3 at once (and sees 3), the other 17 queue and are sent in the order
// they queued as each request ends, and all 20 succeed.
func TestTransportCapsRequestsInFlight(t *testing.T) {
	const n, limit = 20, 3
	p := newSlowPartner(t)
	lim := newConcurrency(t, limit)
	var queued atomic.Int32
	c := &http.Client{Transport: &httplimit.Transport{
		Concurrency: lim,
		OnWait: func(_ *http.Request, w httplimit.Wait) {
			if w.Queued {
				queued.Add(1)
			}
		},
	}}

	var got tally
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got.add(sendSeq(c, context.Background(), p.url, i)) })
		if i < limit {
			waitFor(t, fmt.Sprintf("request %d at the server", i), func() bool { return len(p.arrived()) == i+1 })
		} else {
			waitFor(t, fmt.Sprintf("request %d queued", i), func() bool { return lim.Stats().Waiting == i-limit+1 })
		}
	}
	now, _ := p.running()
	require.Equal(t, limit, now, "running at the server")
	require.Equal(t, []string{"0", "1", "2"}, p.arrived())

	// One request ends at a time: the one slot it frees goes to the oldest
	// waiter, which is the only request that can arrive next.
	for i := limit; i < n; i++ {
		p.finish()
		waitFor(t, fmt.Sprintf("request %d at the server", i), func() bool { return len(p.arrived()) == i+1 })
		require.Equal(t, strconv.Itoa(i), p.arrived()[i], "arrival %d", i)
		require.Equal(t, n-i-1, lim.Stats().Waiting, "still queued after arrival %d", i)
	}
	for range limit {
		p.finish()
	}
	wg.Wait()

	require.Empty(t, got.errs)
	require.Equal(t, map[int]int{200: n}, got.byStatus)
	_, most := p.running()
	require.Equal(t, limit, most, "the most running at once")
	require.EqualValues(t, n-limit, queued.Load(), "requests that queued")
	require.Equal(t, limit, lim.Peek(hostKey(p.url)).Remaining, "every slot back")
}

// hostKey is the Transport's default key of a request to url.
func hostKey(url string) string {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return req.URL.Host
}

// A request queued for a slot whose context ends fails with a
// *TransportError that says so, unsent and holding nothing: the slot held
// stays the only one held, and the next waiter gets the next slot.
func TestTransportCancelWhileQueuedFreesNothing(t *testing.T) {
	p := newSlowPartner(t)
	lim := newConcurrency(t, 1)
	c := &http.Client{Transport: &httplimit.Transport{Concurrency: lim}}
	key := hostKey(p.url)

	first := make(chan error, 1)
	go func() { _, err := sendSeq(c, context.Background(), p.url, 0); first <- err }()
	waitFor(t, "the first request at the server", func() bool { return len(p.arrived()) == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { _, err := sendSeq(c, ctx, p.url, 1); cancelled <- err }()
	waitFor(t, "the second request queued", func() bool { return lim.Stats().Waiting == 1 })
	cancel()
	err := <-cancelled
	te := transportError(t, err)
	require.Equal(t, key, te.Key)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "httplimit: queued behind 1 request in flight, the most at once: keylimit: acquire 1 slot: context canceled")
	require.Equal(t, 0, lim.Stats().Waiting)
	require.Equal(t, 0, lim.Peek(key).Remaining, "the first request still holds the one slot")

	// A deadline that passes while queued: the same, as DeadlineExceeded.
	short, cancelShort := context.WithTimeout(context.Background(), 20*ms)
	defer cancelShort()
	_, err = sendSeq(c, short, p.url, 2)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "queued behind 1 request in flight, the most at once: keylimit: acquire 1 slot: context deadline exceeded")
	require.Equal(t, 0, lim.Peek(key).Remaining)

	third := make(chan error, 1)
	go func() { _, err := sendSeq(c, context.Background(), p.url, 3); third <- err }()
	waitFor(t, "the third request queued", func() bool { return lim.Stats().Waiting == 1 })
	p.finish()
	require.NoError(t, <-first)
	waitFor(t, "the third request at the server", func() bool { return len(p.arrived()) == 2 })
	p.finish()
	require.NoError(t, <-third)
	require.Equal(t, []string{"0", "3"}, p.arrived(), "the requests given up on were never sent")
	require.Equal(t, 1, lim.Peek(key).Remaining)
}

// Where a request's slot is given back: its body read to the end, or
// closed, or its context ended; at once for an answer with no body, an
// error of Base, and an answer a retry replaces.
func TestTransportSlotIsHeldUntilTheBodyEnds(t *testing.T) {
	srv := newPartner(t, clock.NewMock(), refuseFirst(1, http.StatusTooManyRequests))
	lim := newConcurrency(t, 1)
	fixed := func(*http.Request) (string, error) { return "partner", nil }
	tr := &httplimit.Transport{Concurrency: lim, Key: fixed, Retries: 1, Backoff: ms, MaxBackoff: ms}
	free := func() int { return lim.Peek("partner").Remaining }
	roundTrip := func(ctx context.Context, tr *httplimit.Transport, method string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		return resp
	}

	// The first answer is a 429, retried: the retry needs the one slot.
	resp := roundTrip(context.Background(), tr, http.MethodGet)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 2, srv.count(), "sent twice")
	require.Equal(t, 0, free(), "held while the body is unread")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "answer 1\n", string(body))
	require.Equal(t, 1, free(), "given back at the end of the body, before Close")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 1, free(), "a Close after the end gives back nothing more")

	resp = roundTrip(context.Background(), tr, http.MethodGet)
	require.Equal(t, 0, free())
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 1, free(), "given back by Close, unread")

	resp = roundTrip(context.Background(), tr, http.MethodHead)
	require.Equal(t, http.NoBody, resp.Body)
	require.Equal(t, 1, free(), "no body: given back at once")

	ctx, cancel := context.WithCancel(context.Background())
	resp = roundTrip(ctx, tr, http.MethodGet)
	require.Equal(t, 0, free())
	cancel()
	waitFor(t, "the slot back after the context ended", func() bool { return free() == 1 })
	resp.Body.Close()
	require.Equal(t, 1, free())

	broken := errors.New("connection refused")
	failing := &httplimit.Transport{Concurrency: lim, Key: fixed,
		Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, broken })}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = failing.RoundTrip(req)
	require.ErrorIs(t, err, broken)
	require.Equal(t, 1, free(), "an error of Base: given back at once")
}

// A body its caller never reads nor closes, under a context that never
// ends, holds its slot until WithMaxHold takes it back: the request queued
// behind it is then sent.
func TestTransportMaxHoldTakesBackALeakedBody(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, func(int, *http.Request, http.Header) int { return http.StatusOK })
	lim := newConcurrency(t, 1, keylimit.WithClock(mock), keylimit.WithMaxHold(time.Minute))
	c := &http.Client{Transport: &httplimit.Transport{Concurrency: lim}}

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	leaked, err := c.Do(req)
	require.NoError(t, err)
	_ = leaked // its body is never read nor closed

	next := make(chan error, 1)
	go func() { _, err := fetch(c, context.Background(), srv.URL); next <- err }()
	waitFor(t, "the next request queued", func() bool { return lim.Stats().Waiting == 1 })
	require.Equal(t, 1, srv.count())
	// From two longest holds on, the slot is free to the waiter, which
	// wakes at each longest hold.
	for range 2 {
		mock.Add(time.Minute)
	}
	require.True(t, waitUpTo(10*time.Second, func() bool {
		if srv.count() == 2 {
			return true
		}
		mock.Add(time.Minute) // the waiter's wake-up may have been set after the first Add
		return false
	}), "the queued request was sent")
	require.NoError(t, <-next)
	require.EqualValues(t, 1, lim.Stats().Reclaimed)
	leaked.Body.Close()
	require.Equal(t, 1, lim.Peek(hostKey(srv.URL)).Remaining, "the late Close gives back nothing more")
}

// A request queued for a slot has taken no turn of Limiter: it takes its
// turn once it holds a slot, so turns are spent as requests are sent.
func TestTransportSlotBeforeTurn(t *testing.T) {
	mock := clock.NewMock()
	srv := newPartner(t, mock, func(int, *http.Request, http.Header) int { return http.StatusOK })
	bucket := newBucket(t, keylimit.PerSecond(1).WithBurst(1), mock)
	lim := newConcurrency(t, 1)
	fixed := func(*http.Request) (string, error) { return "partner", nil }
	c := &http.Client{Transport: &httplimit.Transport{Concurrency: lim, Limiter: bucket, Key: fixed, Clock: mock}}

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	first, err := c.Do(req)
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() { _, err := fetch(c, context.Background(), srv.URL); second <- err }()
	waitFor(t, "the second request queued", func() bool { return lim.Stats().Waiting == 1 })
	mock.Add(time.Second)
	require.Equal(t, 1, bucket.Peek("partner").Remaining, "the queued request holds no turn")
	first.Body.Close()
	require.NoError(t, <-second)
	require.Equal(t, 0, bucket.Peek("partner").Remaining, "its turn, taken once it held the slot")
	require.Equal(t, 2, srv.count())
}

// TestTransportCloseAsTheContextEnds pins issue 37.2 in the Transport: a
// body closed just as its request's context ends releases its slot twice,
// at once (Close, and the context's AfterFunc), while the next request
// waits for it. The second Release frees nothing: each round, the waiting
// request gets the one slot, and then no other fits.
func TestTransportCloseAsTheContextEnds(t *testing.T) {
	lim := newConcurrency(t, 1)
	fixed := func(*http.Request) (string, error) { return "partner", nil }
	base := roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
	})
	tr := &httplimit.Transport{Concurrency: lim, Key: fixed, Base: base}
	roundTrip := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://partner.example/", nil)
		if err != nil {
			return nil, err
		}
		return tr.RoundTrip(req)
	}
	for round := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		first, err := roundTrip(ctx)
		require.NoError(t, err, "round %d", round)
		type answer struct {
			resp *http.Response
			err  error
		}
		next := make(chan answer, 1)
		go func() {
			resp, err := roundTrip(context.Background())
			next <- answer{resp, err}
		}()
		waitFor(t, "the next request queued", func() bool { return lim.Stats().Waiting == 1 })
		var both sync.WaitGroup
		both.Go(cancel)
		both.Go(func() { first.Body.Close() })
		both.Wait()
		a := <-next
		require.NoError(t, a.err, "round %d", round)
		require.Equal(t, 0, lim.Peek("partner").Remaining, "round %d: the next request holds the one slot", round)
		_, r := lim.TryAcquire("partner", 1)
		require.False(t, r.Allowed, "round %d: the slot was not freed twice", round)
		require.NoError(t, a.resp.Body.Close())
		require.Equal(t, 1, lim.Peek("partner").Remaining, "round %d", round)
	}
}
