package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/bounded"
)

// TransportError is the error of a request the Transport could not send: a
// wait for its turn failed (the context ended, or would have ended first),
// or Throttle rejected it.
// Its message says how long the wait would have been, and until when the
// server paused the key. errors.Is and errors.As see through it to Err.
type TransportError struct {
	// Key is the request's key.
	Key string
	// Retries is how many times the request had been sent again.
	Retries int
	// StatusCode is the status of the server's last answer, a refusal the
	// wait was for a retry after, or 0 if the request had not been
	// answered yet.
	StatusCode int
	// Until is the end of the server's pause on Key, or the zero Time if
	// no pause was in effect.
	Until time.Time
	// Err is the error of the wait: one matching
	// keylimit.ErrWouldExceedDeadline (and context.DeadlineExceeded) if it
	// would have outlasted the deadline, the context's error if it ended
	// first, keylimit.ErrExceedsLimit if the Limiter can never admit a
	// request, one matching ErrThrottled if Throttle rejected it. A wait
	// for a slot of Concurrency fails only when the context ends (how long
	// the requests in flight take is not known): its error says how many
	// were in flight and wraps the context's.
	Err error
}

func (e *TransportError) Error() string {
	var b strings.Builder
	if errors.Is(e.Err, ErrThrottled) {
		fmt.Fprintf(&b, "httplimit: not sending to %s", bounded.Quote(e.Key))
	} else {
		fmt.Fprintf(&b, "httplimit: waiting to send to %s", bounded.Quote(e.Key))
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " again after %s (%s so far)", statusLine(e.StatusCode), retries(e.Retries))
	}
	if !e.Until.IsZero() {
		fmt.Fprintf(&b, ", paused by the server until %s", e.Until.UTC().Format("2006-01-02T15:04:05.999Z07:00"))
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *TransportError) Unwrap() error { return e.Err }

// deadlineError is the error of a wait for a server's pause or a retry's
// backoff that would outlast the context's deadline.
type deadlineError struct{ wait, left time.Duration }

func (e *deadlineError) Error() string {
	return fmt.Sprintf("httplimit: waiting %v would outlast the context deadline, %v away", e.wait, e.left)
}

// Is makes the error match keylimit.ErrWouldExceedDeadline, as the waits of
// a Limiter do, and context.DeadlineExceeded: the deadline would have
// passed first.
func (e *deadlineError) Is(target error) bool {
	return target == keylimit.ErrWouldExceedDeadline || target == context.DeadlineExceeded
}

// retries formats a count of retries: "1 retry", "3 retries".
func retries(n int) string {
	if n == 1 {
		return "1 retry"
	}
	return fmt.Sprintf("%d retries", n)
}

// statusLine formats a status: "429 Too Many Requests".
func statusLine(code int) string {
	return fmt.Sprintf("%d %s", code, http.StatusText(code))
}
