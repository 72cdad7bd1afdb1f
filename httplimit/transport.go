package httplimit

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// Transport is an http.RoundTripper that keeps a client under a server's
// rate limit, and backs off when the server says so.
//
// Before each send, retries included, it waits for one event of Limiter
// under the request's key, and for the end of any pause the server put on
// that key. A wait that fails takes nothing, and one that would outlast the
// request's context fails at once, with a *TransportError.
//
// A 429 or 503 with Retry-After or a RateLimit t=, and a RateLimit member
// with r=0 on any answer, pause the key until the time the server gave, for
// every request through the Transport (see RoundTrip). Its methods are safe
// for concurrent use; it must not be copied after first use. The zero
// Transport sends through http.DefaultTransport, has no limit of its own,
// retries nothing, and obeys the server's pauses.
type Transport struct {
	// Base sends the requests. nil means http.DefaultTransport.
	Base http.RoundTripper

	// Limiter is the client's own limit: every request, each retry too,
	// waits for one event of it under the request's key. Set it at or below
	// the server's limit. nil means no limit of its own.
	Limiter keylimit.Limiter[string]

	// Key returns the key of a request, for Limiter and for the server's
	// pauses: Header("X-API-Key") when the partner limits each API key, or
	// your own KeyFunc. nil means the request's host: its URL.Host,
	// lower-cased. A request Key returns an error for is not sent:
	// RoundTrip returns that error.
	Key KeyFunc

	// Retries is the most times a request is sent again after a 429 or 503;
	// 0 means never. Only a request that is idempotent (GET, HEAD, OPTIONS,
	// TRACE, PUT, DELETE, one with an Idempotency-Key field, or one whose
	// context MarkIdempotent marked) and whose body can be replayed (none,
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

	// Rand returns the random numbers of the jitter, in [0, 1). nil means
	// math/rand/v2's Float64. It must be safe for concurrent use.
	Rand func() float64

	// Clock is where the Transport reads time and sleeps: pass the clock
	// of Limiter (keylimit.WithClock). nil means the system clock.
	Clock clock.Clock

	mu sync.Mutex
	// paused maps a key to the end of the server's pause on it. Protected
	// by mu. A pause only ever grows later; an entry that has ended is
	// deleted when next read, or by the sweep that adding a pause to
	// sweepAbove or more runs.
	paused map[string]time.Time
}

// Defaults of the zero Transport.
const (
	defaultBackoff    = 500 * time.Millisecond
	defaultMaxBackoff = 30 * time.Second
	// drainLimit bounds what is read from the body of an answer that is
	// retried, so that its connection can be reused without reading an
	// endless body.
	drainLimit = 64 << 10
	// sweepAbove is the number of pauses above which adding one first
	// deletes those that have ended.
	sweepAbove = 64
)

var systemClock = clock.New()

// idempotentKey is the context key of MarkIdempotent.
type idempotentKey struct{}

// MarkIdempotent returns a copy of ctx that marks the requests made with it
// as idempotent: safe to send twice. The Transport may then retry them
// whatever their method, a POST or a PATCH included, if their body can be
// replayed.
func MarkIdempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, idempotentKey{}, true)
}

// RoundTrip sends req through Base when its key's turn comes, sends it again
// if Retries allows and the server refused it, and returns the server's
// answer. It returns a *TransportError if it could not wait for the turn
// (the context ended, or would have ended first) or gave up retrying
// (ErrGaveUp), and an error of Base at once, never retried.
//
// A 429 or 503 pauses the key by its Retry-After (seconds or an HTTP-date,
// RFC 9110), or else by the RateLimit field's t (of a member with r=0 if
// one has it); any other answer by a RateLimit member with r=0 and t.
// X-RateLimit-* fields are not read: their units differ between servers.
// A pause is obeyed in full, however long: give requests a deadline
// (http.Client.Timeout, or a context) to fail at once instead.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := t.key(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	retryable := t.Retries > 0 && idempotent(req) && replayable(req)
	var (
		notBefore time.Time // a retry's backoff ends at
		status    int       // the last answer, when retrying
	)
	for retry := 0; ; retry++ {
		if err := keylimit.WaitN(ctx, gate{t, notBefore}, key, 1, t.clock()); err != nil {
			if retry == 0 {
				closeBody(req)
			}
			return nil, &TransportError{Key: key, Retries: max(retry-1, 0), StatusCode: status,
				Until: t.pausedUntil(key, t.clock().Now()), Err: err}
		}
		send := req
		if retry > 0 {
			var err error
			if send, err = rewind(req); err != nil {
				return nil, fmt.Errorf("httplimit: replaying the body of %s %s for retry %d: %w", req.Method, req.URL.Redacted(), retry, err)
			}
		}
		resp, err := t.base().RoundTrip(send)
		if err != nil {
			return nil, err
		}
		now := t.clock().Now()
		until := serverPause(resp, retryStatus(resp.StatusCode), now)
		if !until.IsZero() {
			t.pause(key, until, now)
		}
		if !retryable || !retryStatus(resp.StatusCode) {
			return resp, nil
		}
		discard(resp)
		if retry == t.Retries {
			return nil, &TransportError{Key: key, Retries: retry, StatusCode: resp.StatusCode,
				Until: t.pausedUntil(key, now), Err: ErrGaveUp}
		}
		status = resp.StatusCode
		notBefore = later(now, until).Add(t.backoff(retry))
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

// gate is what a request waits on before each send: nothing passes before
// notBefore (a retry's backoff) nor while the server's pause on the key
// lasts; after that the Transport's Limiter decides. Since it refuses without
// asking the Limiter until then, keylimit.WaitN waits out both in one loop,
// under the request's deadline, and a wait cut short takes nothing.
type gate struct {
	t         *Transport
	notBefore time.Time
}

func (g gate) Take(key string, n int) keylimit.Result {
	now := g.t.clock().Now()
	until := later(g.t.pausedUntil(key, now), g.notBefore)
	if wait := until.Sub(now); wait > 0 {
		return keylimit.Result{RetryAfter: wait}
	}
	if g.t.Limiter == nil {
		return keylimit.Result{Allowed: true}
	}
	return g.t.Limiter.Take(key, n)
}

// pause records that the server asked for nothing under key until until.
func (t *Transport) pause(key string, until, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.paused == nil {
		t.paused = make(map[string]time.Time)
	}
	if cur, ok := t.paused[key]; ok && !until.After(cur) {
		return // an answer that arrived late does not shorten a pause
	}
	if len(t.paused) >= sweepAbove {
		for k, u := range t.paused {
			if !u.After(now) {
				delete(t.paused, k)
			}
		}
	}
	t.paused[key] = until
}

// pausedUntil returns the end of the server's pause on key, or the zero Time
// if there is none at now.
func (t *Transport) pausedUntil(key string, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.paused[key]
	if ok && !until.After(now) {
		delete(t.paused, key)
		return time.Time{}
	}
	return until
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
	r := rand.Float64
	if t.Rand != nil {
		r = t.Rand
	}
	half := d / 2
	return d - half + time.Duration(min(max(r(), 0), 1)*float64(half))
}

func (t *Transport) key(req *http.Request) (string, error) {
	if t.Key != nil {
		return t.Key(req)
	}
	return strings.ToLower(req.URL.Host), nil
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

// retryStatus reports whether an answer with this status may be retried:
// 429 Too Many Requests and 503 Service Unavailable, the refusals of a server
// that will take the request later.
func retryStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// idempotent reports whether req may be sent twice: RFC 9110's idempotent
// methods, a request with an Idempotency-Key field, or one marked by
// MarkIdempotent.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if req.Header.Get("Idempotency-Key") != "" {
		return true
	}
	marked, _ := req.Context().Value(idempotentKey{}).(bool)
	return marked
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
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
