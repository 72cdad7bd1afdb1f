package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/httplimit"
)

// A client that stays under a partner's limit of 2 requests a second. Each
// request waits for its turn, but never past its deadline: the third, whose
// turn is 500 ms away, has only 100 ms and fails at once, saying so.
func ExampleTransport() {
	partner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer partner.Close()

	mock := clock.NewMock() // stands for time here; leave Clock nil in production
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	defer perSecond.Close()
	client := &http.Client{Transport: &httplimit.Transport{
		Limiter: perSecond,
		Key:     func(r *http.Request) (string, error) { return r.URL.Hostname(), nil },
		Clock:   mock,
	}}

	for i := 1; i <= 3; i++ {
		ctx, cancel := mock.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		resp, err := client.Do(req)
		cancel()
		if err != nil {
			var te *httplimit.TransportError
			errors.As(err, &te)
			fmt.Println(i, te)
			continue
		}
		resp.Body.Close()
		fmt.Println(i, resp.Status)
	}
	// Output:
	// 1 200 OK
	// 2 200 OK
	// 3 httplimit: waiting to send to "127.0.0.1": keylimit: waiting 500ms for 1 event would outlast the context deadline, 100ms away
}

// The partner answers the first request with 429 and Retry-After: 2. The
// Transport pauses the host for every caller until then: a request with a
// 1 s deadline fails at once; 2 s later requests go through again.
func ExampleTransport_RoundTrip() {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer partner.Close()

	mock := clock.NewMock()
	tr := &httplimit.Transport{Clock: mock, Key: func(r *http.Request) (string, error) { return r.URL.Hostname(), nil }}
	send := func(timeout time.Duration) {
		ctx, cancel := mock.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}

	send(time.Second)
	send(time.Second)
	mock.Add(2 * time.Second)
	send(time.Second)
	fmt.Println("the partner saw", calls.Load(), "requests")
	// Output:
	// 429 Too Many Requests
	// httplimit: waiting to send to "127.0.0.1", paused by the server until 1970-01-01T00:00:02Z: httplimit: waiting 2s would outlast the context deadline, 1s away
	// 200 OK
	// the partner saw 2 requests
}

// With Retries, the Transport sends an idempotent request again after a 429
// or 503, after a jittered backoff; the caller sees only the final answer.
func ExampleTransport_retries() {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "done")
	}))
	defer partner.Close()

	client := &http.Client{Transport: &httplimit.Transport{Retries: 3, Backoff: 5 * time.Millisecond}}
	resp, err := client.Get(partner.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	fmt.Println("the partner saw", calls.Load(), "requests")
	// Output:
	// 200 OK done
	// the partner saw 3 requests
}

// A server whose answer says no requests are left for 30 s (RateLimit r=0,
// t=30) pauses the key, even on a 200. The error of a request that cannot
// wait that long tells what happened.
func ExampleTransportError() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit", `"default";r=0;t=30`)
	}))
	defer partner.Close()

	mock := clock.NewMock()
	client := &http.Client{Transport: &httplimit.Transport{Clock: mock, Key: func(*http.Request) (string, error) { return "partner", nil }}}
	resp, _ := client.Get(partner.URL)
	resp.Body.Close()

	ctx, cancel := mock.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
	_, err := client.Do(req)
	var te *httplimit.TransportError
	if errors.As(err, &te) {
		fmt.Println("key:", te.Key)
		fmt.Println("paused until:", te.Until.UTC())
		fmt.Println("would outlast the deadline:", errors.Is(err, keylimit.ErrWouldExceedDeadline))
	}
	// Output:
	// key: partner
	// paused until: 1970-01-01 00:00:30 +0000 UTC
	// would outlast the deadline: true
}

// A server that keeps refusing: after Retries retries the Transport gives
// up and returns the last answer, whose body the caller reads as usual.
func ExampleTransport_retriesRunOut() {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "busy (answer %d)", calls.Add(1))
	}))
	defer partner.Close()

	client := &http.Client{Transport: &httplimit.Transport{Retries: 2, Backoff: time.Millisecond}}
	resp, err := client.Get(partner.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output:
	// 503 Service Unavailable busy (answer 3)
}

// A partner that refuses with 403 and Retry-After, as GitHub does: Refused
// says that is a refusal, so the Transport pauses the key as for a 429. A
// request that cannot wait 30 s fails at once.
func ExampleTransport_refused() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusForbidden)
	}))
	defer partner.Close()

	mock := clock.NewMock()
	client := &http.Client{Transport: &httplimit.Transport{
		Refused: func(r *http.Response) bool {
			return r.StatusCode == 429 || r.StatusCode == 503 ||
				r.StatusCode == 403 && r.Header.Get("Retry-After") != ""
		},
		Key:   func(*http.Request) (string, error) { return "api.github.com", nil },
		Clock: mock,
	}}
	resp, _ := client.Get(partner.URL)
	resp.Body.Close()
	fmt.Println(resp.Status)

	ctx, cancel := mock.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
	_, err := client.Do(req)
	fmt.Println(errors.Unwrap(err))
	// Output:
	// 403 Forbidden
	// httplimit: waiting to send to "api.github.com", paused by the server until 1970-01-01T00:00:30Z: httplimit: waiting 30s would outlast the context deadline, 10s away
}

// OnWait sees what each request waited for: here the second request's turn
// at the Transport's limit is 500 ms away, beyond its deadline.
func ExampleWait() {
	partner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer partner.Close()

	mock := clock.NewMock()
	perSecond, _ := keylimit.NewTokenBucket[string](keylimit.PerSecond(2), keylimit.WithClock(mock))
	defer perSecond.Close()
	client := &http.Client{Transport: &httplimit.Transport{
		Limiter: perSecond,
		Key:     func(*http.Request) (string, error) { return "partner", nil },
		Clock:   mock,
		OnWait: func(_ *http.Request, w httplimit.Wait) {
			fmt.Printf("%s: waited %v, paused %v, retries %d, err %v\n", w.Key, w.Waited, w.Paused, w.Retries, w.Err)
		},
	}}
	for range 3 {
		ctx, cancel := mock.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	// Output:
	// partner: waited 0s, paused false, retries 0, err <nil>
	// partner: waited 0s, paused false, retries 0, err <nil>
	// partner: waited 0s, paused false, retries 0, err keylimit: waiting 500ms for 1 event would outlast the context deadline, 100ms away
}

// A POST is not retried unless marked idempotent, here because the partner
// deduplicates orders by their id: by an Idempotency-Key field, or, as for
// net/http's own Transport, one whose value is nil, which marks the request
// and is not sent.
func ExampleTransport_idempotent() {
	var calls atomic.Int32
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("partner: %s %s %q\n", r.Method, body, r.Header.Values("Idempotency-Key"))
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer partner.Close()

	client := &http.Client{Transport: &httplimit.Transport{Retries: 1, Backoff: time.Millisecond}}
	req, _ := http.NewRequest(http.MethodPost, partner.URL, strings.NewReader(`{"order":42}`))
	req.Header["Idempotency-Key"] = nil
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// partner: POST {"order":42} []
	// partner: POST {"order":42} []
	// 200 OK
}

// CloseIdleConnections reaches the Base transport, so that
// http.Client.CloseIdleConnections works through the Transport.
func ExampleTransport_CloseIdleConnections() {
	base := noisyBase{&http.Transport{}}
	client := &http.Client{Transport: &httplimit.Transport{Base: base}}
	client.CloseIdleConnections()
	// Output:
	// base: closing idle connections
}

// noisyBase is an http.Transport that says when its idle connections close.
type noisyBase struct{ *http.Transport }

func (b noisyBase) CloseIdleConnections() {
	fmt.Println("base: closing idle connections")
	b.Transport.CloseIdleConnections()
}

// A partner that allows one report at a time per API key. The Transport
// holds the key's one slot from the send until the answer's body is read
// to its end or closed, or the request's context ends: a second request
// queues for it, and fails, unsent, when its deadline passes first. Once
// the body is closed, the next request goes.
func ExampleTransport_concurrency() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "report")
	}))
	defer partner.Close()

	oneAtATime, _ := keylimit.NewConcurrency[string](1, keylimit.WithMaxHold(10*time.Minute))
	defer oneAtATime.Close()
	client := &http.Client{Transport: &httplimit.Transport{
		Concurrency: oneAtATime,
		Key:         func(*http.Request) (string, error) { return "acme", nil },
		OnWait: func(_ *http.Request, w httplimit.Wait) {
			if w.Queued {
				fmt.Println("queued for a slot of", w.Key)
			}
		},
	}}
	get := func(ctx context.Context) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, partner.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			var te *httplimit.TransportError
			errors.As(err, &te)
			fmt.Println(te)
			return nil
		}
		fmt.Println(resp.Status)
		return resp
	}

	first := get(context.Background()) // its body is not read yet: it holds the slot
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	get(short)
	cancel()
	first.Body.Close() // gives the slot back
	second := get(context.Background())
	io.Copy(io.Discard, second.Body) // read to its end: the slot is back
	fmt.Println("slots free:", oneAtATime.Peek("acme").Remaining)
	second.Body.Close()
	// Output:
	// 200 OK
	// queued for a slot of acme
	// httplimit: waiting to send to "acme": httplimit: queued behind 1 request in flight, the most at once: keylimit: acquire 1 slot: context deadline exceeded
	// 200 OK
	// slots free: 1
}

// A partner that fails every request. With Throttle 2, the Transport
// counts its recent requests and the partner's accepts, and sends each
// request with probability 1 − (requests − 2 × accepts) / (requests + 1):
// the first for sure, the second one time in two, the third one in three.
// A request it holds back is never sent, and fails with ErrThrottled. (The
// random numbers here are all 0.5; leave Rand nil in production.)
func ExampleTransport_throttle() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer partner.Close()

	client := &http.Client{Transport: &httplimit.Transport{
		Throttle:       2,
		ThrottleWindow: time.Second, // the counts fall by e each second; 250 ms if 0
		Key:            func(*http.Request) (string, error) { return "partner", nil },
		Rand:           func() float64 { return 0.5 },
		Clock:          clock.NewMock(), // time stands still: the counts do not decay
	}}
	for i := 1; i <= 4; i++ {
		resp, err := client.Get(partner.URL)
		if errors.Is(err, httplimit.ErrThrottled) {
			var te *httplimit.TransportError
			errors.As(err, &te)
			fmt.Println(i, te.Err)
			continue
		}
		resp.Body.Close()
		fmt.Println(i, resp.Status)
	}
	// Output:
	// 1 500 Internal Server Error
	// 2 500 Internal Server Error
	// 3 httplimit: throttled locally, rejected with probability 0.67 = (requests 2.0 − K 2 × accepts 0.0) / (requests + 1), counted over 1s
	// 4 httplimit: throttled locally, rejected with probability 0.75 = (requests 3.0 − K 2 × accepts 0.0) / (requests + 1), counted over 1s
}

// With an adaptive.Limiter as its Concurrency, the Transport learns how
// many requests a partner takes at once: a request the partner refuses (or
// fails, or that times out) gives its slot back by Permit.Drop, and the
// limit falls; others give it back by Release, and the limiter raises the
// limit while the partner keeps up. Here AIMD(8, 100) starts at its
// floor, 8: the 32 refusals, two windows of 16 with a drop, would cut it
// by a tenth each, but never below the floor; AIMD(1, 100) would start at
// 1 and stay there.
func ExampleTransport_adaptive() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer partner.Close()

	adaptive, _ := adaptive.New[string](adaptive.AIMD(8, 100), keylimit.WithClock(clock.NewMock()))
	defer adaptive.Close()
	client := &http.Client{Transport: &httplimit.Transport{Concurrency: adaptive}}
	fmt.Println("limit:", adaptive.Stats().Limit)
	for range 32 {
		resp, err := client.Get(partner.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // the slot goes back, by Drop: a 503
	}
	fmt.Println("after 32 refusals:", adaptive.Stats().Limit)
	// Output:
	// limit: 8
	// after 32 refusals: 8
}
