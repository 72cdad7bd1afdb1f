package httplimit

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/throttle"
)

// Transport is an http.RoundTripper that keeps a client under a server's
// rate limit, and backs off when the server says so.
//
// Before each send, retries included, it waits for the end of any pause the
// server put on the request's key (and of a retry's backoff), then for a
// slot of Concurrency, then for the request's turn at Limiter under that
// key. Each of the waits for a pause or a turn that would outlast the
// request's deadline fails at once, taking nothing, with a
// *TransportError; a wait for a slot lasts until the context ends.
//
// A refusal (Refused: 429 or 503 by default) with Retry-After or a
// RateLimit t=, and a RateLimit member with r=0 on any answer, pause the
// key until the time the server gave, for every request through the
// Transport (see RoundTrip). It is safe for concurrent use and must not be
// copied after first use. The zero Transport sends through
// http.DefaultTransport, has no limit of its own, retries nothing, and
// obeys the server's pauses.
type Transport struct {
	// Base sends the requests. nil means http.DefaultTransport.
	Base http.RoundTripper

	// Limiter is the client's own limit: every request, each retry too,
	// waits its turn for one event of it under the request's key, by
	// keylimit.WaitN under the request's context. A *keylimit.TokenBucket
	// serves the waiters of a key first come, first served. Set it at or
	// below the server's limit. nil means no limit of its own.
	Limiter keylimit.Limiter[string]

	// Concurrency caps the requests in flight under each key: a send
	// holds one slot of it under the request's key, from before its turn
	// at Limiter until its answer's body is read to its end (or fails) or
	// closed, or until the request's context ends. An answer with no body
	// (http.NoBody, as for a HEAD or a 204), an error of Base, and an
	// answer the Transport replaces with a retry give the slot back at
	// once. A request whose key's slots are all held waits for one under
	// its context, first come, first served with a
	// *keylimit.Concurrency; if the context ends first, RoundTrip returns a
	// *TransportError, having sent nothing and holding nothing. A body
	// never read to its end nor closed holds its slot until the context
	// ends: give the limiter keylimit.WithMaxHold to take such slots back.
	// nil means no cap. With an *adaptive.Limiter the cap finds the
	// partner's capacity: the slot of a send whose answer is a refusal
	// (Refused) or a 5xx, or that fails (an error of Base, its body failing
	// or its deadline passing), goes back by Permit.Drop, any other by
	// Release.
	Concurrency keylimit.ConcurrencyLimiter[string]

	// Key returns the key of a request, for Limiter and for the server's
	// pauses: Header("X-API-Key") when the partner limits each API key, or
	// your own KeyFunc. nil means the request's host: its URL.Host,
	// lower-cased. A request Key returns an error for is not sent:
	// RoundTrip returns that error.
	Key KeyFunc

	// Refused reports whether an answer refuses the request for now: its
	// Retry-After (or else its RateLimit t) pauses the key, and Retries may
	// send the request again. nil means 429 Too Many Requests and 503
	// Service Unavailable. GitHub, for one, also refuses with 403 and
	// Retry-After:
	//
	//	Refused: func(r *http.Response) bool {
	//		return r.StatusCode == 429 || r.StatusCode == 503 ||
	//			r.StatusCode == 403 && r.Header.Get("Retry-After") != ""
	//	},
	Refused func(*http.Response) bool

	// Retries is the most times a request is sent again after a refusal;
	// 0 means never. Only a request that is idempotent (GET, HEAD, OPTIONS,
	// TRACE, PUT, DELETE, or one with an Idempotency-Key or
	// X-Idempotency-Key field: req.Header["Idempotency-Key"] = nil marks a
	// request without sending the field, as for net/http's Transport) and
	// whose body can be replayed (none,
	// or Request.GetBody set, as http.NewRequest does for in-memory bodies)
	// is retried. A retry waits for the server's pause, then Backoff, then
	// its turn; the answers it replaces are read (up to 64 KiB) and closed.
	Retries int

	// Backoff is the delay before the first retry, doubled for each one
	// after, up to MaxBackoff, and counted from the end of the server's
	// pause if there is one. Each delay is jittered: a random point between
	// half of it and all of it, so that clients refused together do not
	// come back in the same millisecond. 0 means 500 ms.
	Backoff time.Duration

	// MaxBackoff caps the delay between retries. 0 means 30 s.
	MaxBackoff time.Duration

	// Throttle, if not 0, throttles requests adaptively, as Google's SRE
	// book has clients do ("Handling Overload"), and is its K: per key, the
	// Transport counts its recent sends (retries too) and those the partner
	// accepted, and rejects a send locally, before any wait, with
	// probability max(0, (requests − Throttle × accepts) / (requests + 1)).
	// A send counts when its answer comes, so that requests in flight never
	// look like failures; a rejected one counts at once, so a partner that
	// fails every request gets about one each ThrottleWindow, and all of
	// them again soon after it recovers. RoundTrip then sends nothing and returns a
	// *TransportError matching ErrThrottled. The partner accepts a request
	// when it answers with a status below 500 that Refused does not refuse;
	// a refusal, a 5xx and an error of Base (a timeout too) are failures; a
	// request not sent after all, or whose context was cancelled before its
	// answer, is not counted. 2 is the usual value: nothing is rejected
	// until the partner fails half the requests. It must be 0 or a finite
	// number of at least 1, or RoundTrip returns an error.
	Throttle float64

	// ThrottleWindow is how recent the counts of Throttle are: a request or
	// an accept weighs e^(−age/ThrottleWindow), so a steady rate counts as
	// many as a window of this length holds. Shorter reacts and comes back
	// sooner (after a failure, in about ThrottleWindow/(Throttle−1) ×
	// ln(1 + rate × ThrottleWindow / Throttle)); longer sends fewer
	// requests to a partner that fails them all. 0 means 250 ms.
	ThrottleWindow time.Duration

	// Rand returns the random numbers of the jitter and of Throttle, in
	// [0, 1). nil means math/rand/v2's Float64. It must be safe for
	// concurrent use.
	Rand func() float64

	// Clock is where the Transport reads time and sleeps: pass the clock
	// of Limiter (keylimit.WithClock), on which Limiter's turns are waited
	// for. nil means the system clock.
	Clock clock.Clock

	// MaxPaused is the most keys the Transport keeps paused at once; 0
	// means 65,536. At the cap it forgets the pauses that end first, an
	// eighth of them, and counts them (Wait.DroppedPauses): a request under a
	// forgotten key may reach the server before the server's pause ends.
	// It is also the most keys Throttle counts for: at the cap it forgets
	// the eighth with the fewest recent requests.
	MaxPaused int

	// OnWait, if set, is called once for each RoundTrip of a request that
	// has a key, as RoundTrip returns, with what the request waited for:
	// feed a histogram of waits, count the requests that could not wait.
	// It runs on the caller's goroutine and must be safe for concurrent
	// use.
	OnWait func(req *http.Request, w Wait)

	pauses   pauses
	throttle throttle.Counts
}

// Wait is what one request waited for before it was sent, over all its
// sends, retries included: what Transport.OnWait sees.
type Wait struct {
	Key string // the request's key
	// Waited is the time the request spent waiting, on Transport.Clock:
	// for the server's pauses, the backoffs before retries, and its turns
	// at Limiter.
	Waited time.Duration
	// Paused reports whether it waited for a server's pause on Key.
	Paused bool
	// Queued reports whether it found every slot of Key in
	// Transport.Concurrency held, or other requests waiting for one, and
	// waited for a slot.
	Queued bool
	// Retries is how many times the request was sent again.
	Retries int
	// Err is the error of the wait that failed, the Err of the
	// *TransportError RoundTrip returned; nil if the request was sent.
	Err error
	// DroppedPauses is how many of the server's pauses (of any key, this
	// one's included) the Transport forgot before their end when an
	// answer to the request paused its key, to keep no more than
	// MaxPaused (metrics.Transport counts them).
	DroppedPauses int
}

// Defaults of the zero Transport.
const (
	defaultBackoff    = 500 * time.Millisecond
	defaultMaxBackoff = 30 * time.Second
	// drainLimit bounds what is read from the body of an answer that is
	// retried, so that its connection can be reused without reading an
	// endless body.
	drainLimit = 64 << 10
)

var systemClock = clock.New()

// RoundTrip sends req through Base when its key's turn comes, sends it again
// if Retries allows and the server refused it, and returns the server's last
// answer with a nil error, as an http.RoundTripper must once it has one.
// When retries run out, or the wait before the next would outlast the
// request's deadline, that answer is the last refusal, its body unread: a
// refusal (see Refused) from RoundTrip tells that it gave up. It returns a
// *TransportError if a wait failed (the context ended, or would have ended
// first), and an error of Base at once, never retried.
//
// A refusal pauses the key by its Retry-After (seconds or an HTTP-date,
// RFC 9110), or else by the RateLimit field's t (of a member with r=0 if
// one has it); any other answer by a RateLimit member with r=0 and t.
// X-RateLimit-* fields are not read: their units differ between servers,
// nor is a RateLimit field over 8 KiB (a real one is a few dozen bytes).
// A pause is obeyed in full, up to 10⁹ s: give requests a deadline
// (http.Client.Timeout, or a context) to fail at once instead.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := t.key(req)
	if err == nil && (t.Throttle != 0 || t.ThrottleWindow != 0) {
		err = t.throttling().Check("httplimit: Transport.Throttle")
	}
	if err != nil {
		closeBody(req)
		return nil, err
	}
	w := Wait{Key: key}
	if t.OnWait != nil {
		defer func() { t.OnWait(req, w) }()
	}
	ctx := req.Context()
	retryable := t.Retries > 0 && idempotent(req) && replayable(req)
	var (
		notBefore time.Time // a retry's backoff ends at
		status    int       // the last answer, once one was refused
	)
	for retry := 0; ; retry++ {
		tk, err := t.wait(ctx, key, notBefore, &w)
		if err != nil {
			if retry == 0 {
				closeBody(req)
			}
			w.Err = err
			return nil, &TransportError{Key: key, Retries: w.Retries, StatusCode: status,
				Until: t.pauses.until(key, t.clock().Now()), Err: err}
		}
		send, err := replay(req, retry)
		if err != nil {
			t.end(key, tk, throttle.Forgotten)
			return nil, err
		}
		w.Retries = retry
		resp, err := t.base().RoundTrip(send)
		if err != nil {
			t.end(key, tk, sendFailure(ctx))
			return nil, err
		}
		refused := t.refused(resp)
		resp.Body = t.hold(ctx, key, tk, resp, answerOutcome(resp, refused))
		now := t.clock().Now()
		until := serverPause(resp, refused, now)
		if !until.IsZero() {
			w.DroppedPauses += t.pauses.add(key, until, now, t.maxPaused())
		}
		if !retryable || !refused || retry == t.Retries {
			return resp, nil
		}
		next := later(now, until).Add(t.backoff(retry))
		if deadline, ok := ctx.Deadline(); ok && next.After(deadline) {
			return resp, nil // no retry can be sent in time: this answer is the last
		}
		discard(resp)
		status = resp.StatusCode
		notBefore = next
	}
}

// wait waits for the request's turn to be sent: it asks Throttle first,
// then waits for the end of the server's pause on key and of a retry's
// backoff (notBefore), then for a slot of Concurrency, then for its turn at
// Limiter, then for the end of any pause the server began meanwhile (the
// slot and the turn are kept, but nothing is sent into a pause). Each wait
// is under ctx. It returns the slot held (the zero Permit if none) and
// Throttle's decision, whose outcome is to be recorded; on an error, it
// holds nothing and leaves nothing to record. What it waited is added to w.
//
// The slot comes before the turn so that the turns are spent as the
// requests are sent: a turn taken first and then held while its request
// waits for a slot would let the waiters of a rate go out together once
// slots free up.
func (t *Transport) wait(ctx context.Context, key string, notBefore time.Time, w *Wait) (throttle.Ticket, error) {
	if err := ctx.Err(); err != nil {
		return throttle.Ticket{}, err // a request whose context has ended costs no turn
	}
	counted, err := t.admit(key)
	if err != nil {
		return throttle.Ticket{}, err
	}
	clk := t.clock()
	var start time.Time
	if t.OnWait != nil {
		start = clk.Now()
	}
	var slot keylimit.Permit
	err = t.waitPause(ctx, clk, key, notBefore, w)
	if err == nil && t.Concurrency != nil {
		slot, err = acquireSlot(ctx, t.Concurrency, key, w)
	}
	if err == nil && t.Limiter != nil {
		err = keylimit.WaitN(ctx, t.Limiter, key, 1)
	}
	if err == nil && (t.Limiter != nil || t.Concurrency != nil) {
		err = t.waitPause(ctx, clk, key, time.Time{}, w)
	}
	if t.OnWait != nil {
		w.Waited += clk.Since(start)
	}
	tk := throttle.Ticket{Slot: slot, Counted: counted}
	if err != nil {
		t.end(key, tk, throttle.Forgotten)
		return throttle.Ticket{}, err
	}
	return tk, nil
}

// waitPause waits until the server's pause on key and notBefore have both
// passed, or fails at once if that would outlast ctx's deadline.
func (t *Transport) waitPause(ctx context.Context, clk clock.Clock, key string, notBefore time.Time, w *Wait) error {
	for {
		now := clk.Now()
		paused := t.pauses.until(key, now)
		d := later(paused, notBefore).Sub(now)
		if d <= 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); ok {
			if left := deadline.Sub(now); d > left {
				return &deadlineError{wait: d, left: max(left, 0)}
			}
		}
		w.Paused = w.Paused || paused.After(now)
		timer := clk.Timer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			// The pause may have grown meanwhile: look again.
		}
	}
}

// CloseIdleConnections closes the idle connections of Base, if it has such a
// method (http.Transport does), so that http.Client.CloseIdleConnections
// reaches through the Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// backoff returns the jittered delay before retry i+1.
func (t *Transport) backoff(i int) time.Duration {
	base, ceil := t.Backoff, t.MaxBackoff
	if base <= 0 {
		base = defaultBackoff
	}
	if ceil <= 0 {
		ceil = defaultMaxBackoff
	}
	d := ceil
	if i < 62 && base <= ceil>>i {
		d = base << i
	}
	half := d / 2
	return d - half + time.Duration(t.random()*float64(half))
}

// random returns a random number in [0, 1], of Rand if it is set.
func (t *Transport) random() float64 {
	if t.Rand != nil {
		return min(max(t.Rand(), 0), 1)
	}
	return rand.Float64()
}

func (t *Transport) key(req *http.Request) (string, error) {
	if t.Key != nil {
		return t.Key(req)
	}
	return strings.ToLower(req.URL.Host), nil
}

func (t *Transport) refused(resp *http.Response) bool {
	if t.Refused != nil {
		return t.Refused(resp)
	}
	return retryStatus(resp.StatusCode)
}

func (t *Transport) maxPaused() int {
	if t.MaxPaused > 0 {
		return t.MaxPaused
	}
	return defaultMaxPaused
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) clock() clock.Clock {
	if t.Clock != nil {
		return t.Clock
	}
	return systemClock
}

// retryStatus reports whether an answer with this status is a refusal by
// default: 429 Too Many Requests and 503 Service Unavailable, the refusals
// of a server that will take the request later.
func retryStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// idempotent reports whether req may be sent twice: RFC 9110's idempotent
// methods, or a request with an Idempotency-Key or X-Idempotency-Key field,
// even one whose value is nil (which marks it and is not sent), as
// net/http's Transport judges.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// replay returns req ready for its send number retry (0 for the first):
// req itself, or for a retry, rewound.
func replay(req *http.Request, retry int) (*http.Request, error) {
	if retry == 0 {
		return req, nil
	}
	again, err := rewind(req)
	if err != nil {
		return nil, fmt.Errorf("httplimit: replaying the body of %s %s for retry %d: %w", req.Method, req.URL.Redacted(), retry, err)
	}
	return again, nil
}

// rewind returns req ready to be sent again: a shallow copy with a fresh body
// when it has one.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	again := *req
	again.Body = body
	return &again, nil
}

// closeBody closes the body of a request RoundTrip does not send: a
// RoundTripper always closes it, errors included.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// discard reads what is left of an answer's body, up to drainLimit, and
// closes it, so that its connection can carry the retry.
func discard(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, drainLimit)
	resp.Body.Close()
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
