package httplimit_test

import (
	"io"
	"net/http"
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

// gate is a slow handler: it holds each request of a key in hold until
// open is closed, and counts those in it now and the most there ever were
// at once.
type gate struct {
	hold      map[string]bool // keys (X-API-Key) whose requests wait for open
	open      chan struct{}
	once      sync.Once
	now, most atomic.Int32
	served    atomic.Int32
}

func newGate(hold ...string) *gate {
	g := &gate{hold: map[string]bool{}, open: make(chan struct{})}
	for _, k := range hold {
		g.hold[k] = true
	}
	return g
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer g.served.Add(1)
	if !g.hold[r.Header.Get("X-API-Key")] {
		return
	}
	n := g.now.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	<-g.open
	g.now.Add(-1)
}

// release lets the held requests go, once (the cleanup of a test that
// failed first included).
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// getAs sends a GET to url with X-API-Key: key, and returns the reply, of
// status -1 if the request failed: it runs on goroutines, and asserts
// nothing.
func getAs(url, key string) reply {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return reply{status: -1}
	}
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{status: -1}
	}
	return reply{resp.StatusCode, resp.Header, string(body)}
}

// Issue 27's end-to-end test, over real connections: 20 concurrent slow
// requests of one key against 5 slots: exactly 5 run at once, counted in
// the handler, and the 15 others are refused, 429 with Retry-After and the
// concurrency fields (q and qu, no w; r and no t); a second key is served
// meanwhile; once the 5 end, their slots are free again.
func TestConcurrentRequestsEndToEnd(t *testing.T) {
	inflight := newConcurrency(t, 5)
	g := newGate("a")
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}},
	})(g))
	t.Cleanup(g.release) // before the server closes, which waits for them

	var wg sync.WaitGroup
	replies := make(chan reply, 20)
	for range 20 {
		wg.Go(func() { replies <- getAs(srv.URL, "a") })
	}
	var refused []reply
	for i := range 15 { // the 5 admitted wait in the handler: 15 answers come first
		select {
		case r := <-replies:
			refused = append(refused, r)
		case <-time.After(10 * s):
			t.Fatalf("%d answers of 20 while 5 are held: more than 5 were admitted", i)
		}
	}
	waitUpTo(10*s, func() bool { return g.now.Load() == 5 })
	require.Equal(t, int32(5), g.now.Load(), "requests in the handler")
	for i, r := range refused {
		require.Equal(t, http.StatusTooManyRequests, r.status, "refused %d", i)
		require.Equal(t, `"inflight";q=5;qu="concurrent-requests"`, r.header.Get("RateLimit-Policy"))
		require.Equal(t, `"inflight";r=0`, r.header.Get("RateLimit"))
		require.Equal(t, 1, retryAfter(t, r.header), "the estimate before any hold has ended")
		require.Equal(t, []string{"inflight"}, decodeRefusal(t, r.body).ViolatedPolicies)
	}

	other := get(t, srv.URL, "X-API-Key", "b")
	require.Equal(t, http.StatusOK, other.status, "another key is not affected")
	require.Equal(t, `"inflight";r=4`, other.header.Get("RateLimit"))

	g.release()
	wg.Wait()
	close(replies)
	for r := range replies {
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, `"inflight";q=5;qu="concurrent-requests"`, r.header.Get("RateLimit-Policy"))
	}
	require.Equal(t, int32(5), g.most.Load(), "most requests of a at once in the handler")
	require.Equal(t, int32(6), g.served.Load())
	require.Equal(t, 5, inflight.Peek("a").Remaining, "every slot is free once the requests ended")
}

// A handler that panics ends its request: the slot is released (the
// middleware defers Finish), and the next request of the key passes.
func TestConcurrentSlotReleasedOnPanic(t *testing.T) {
	inflight := newConcurrency(t, 1)
	h := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-API-Key"),
		Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	for i := range 3 {
		func() {
			defer func() { require.Equal(t, http.ErrAbortHandler, recover(), "request %d", i) }()
			call(h, "/", "X-API-Key", "a")
		}()
		require.Equal(t, 1, inflight.Peek("a").Remaining, "after panic %d the slot is free", i)
	}
}

// A slot policy and a rate policy in one tier, over the middleware, with
// exact counts both ways on a frozen clock: with both slots held, 10
// requests are refused for want of a slot and take nothing from "hour";
// with "hour" used up, 10 requests are refused by it and hold no slot.
func TestConcurrentWithRatePolicy(t *testing.T) {
	mock := clock.NewMock()
	inflight := newConcurrency(t, 2)
	hour := newBucket(t, keylimit.PerHour(5), mock)
	g := newGate("a")
	var seen decisions
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-API-Key"),
		Policies:   []quota.Policy{{Name: "inflight", Concurrency: inflight}, {Name: "hour", Limiter: hour}},
		OnDecision: seen.record,
	})(g))
	t.Cleanup(g.release)

	var wg sync.WaitGroup
	held := make(chan reply, 2)
	for range 2 {
		wg.Go(func() { held <- getAs(srv.URL, "a") })
	}
	waitUpTo(10*s, func() bool { return g.now.Load() == 2 })
	require.Equal(t, int32(2), g.now.Load())
	for i := range 10 {
		r := get(t, srv.URL, "X-API-Key", "a")
		require.Equal(t, http.StatusTooManyRequests, r.status, "request %d", i)
		require.Equal(t, `"inflight";q=2;qu="concurrent-requests", "hour";q=5;w=3600`, r.header.Get("RateLimit-Policy"))
		require.Regexp(t, `^"inflight";r=0, "hour";r=3;t=\d+$`, r.header.Get("RateLimit"))
		require.Equal(t, "inflight", seen.last().Policy)
	}
	require.Equal(t, 3, hour.Peek("a").Remaining, "refused for want of a slot: nothing taken from hour")
	g.release()
	wg.Wait()
	require.Equal(t, http.StatusOK, (<-held).status)
	require.Equal(t, http.StatusOK, (<-held).status)

	for range 3 {
		require.Equal(t, http.StatusOK, get(t, srv.URL, "X-API-Key", "a").status)
	}
	for i := range 10 {
		r := get(t, srv.URL, "X-API-Key", "a")
		require.Equal(t, http.StatusTooManyRequests, r.status, "request %d", i)
		require.Regexp(t, `^"inflight";r=2, "hour";r=0;t=\d+$`, r.header.Get("RateLimit"))
		require.Equal(t, "hour", seen.last().Policy)
		require.Equal(t, 2, inflight.Peek("a").Remaining, "refused by hour, request %d holds no slot", i)
	}
	require.Equal(t, int32(5), g.served.Load(), "the handler served hour's 5")
}
