package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrGaveUp is the Err of a TransportError for a request that the server
// kept refusing until the Transport ran out of retries.
var ErrGaveUp = errors.New("httplimit: gave up retrying")

// TransportError is the error of a request the Transport did not complete:
// it could not wait for the request's turn (the context ended, or would have
// ended first), or the server still refused it after Retries retries. Its
// message says which, how long the wait would have been, and until when the
// server paused the key. errors.Is and errors.As see through it to Err.
type TransportError struct {
	// Key is the request's key.
	Key string
	// Retries is how many times the request had been sent again.
	Retries int
	// StatusCode is the status of the server's last answer, 429 or 503, or
	// 0 if the request had not been answered yet.
	StatusCode int
	// Until is the end of the server's pause on Key, or the zero Time if
	// no pause was in effect.
	Until time.Time
	// Err is what stopped the request: ErrGaveUp, or the error of the wait:
	// one matching keylimit.ErrWouldExceedDeadline (and
	// context.DeadlineExceeded) if it would have outlasted the deadline,
	// the context's error if it ended first, keylimit.ErrExceedsLimit if
	// the Limiter can never admit a request.
	Err error
}

func (e *TransportError) Error() string {
	var b strings.Builder
	if e.Err == ErrGaveUp {
		fmt.Fprintf(&b, "httplimit: gave up on %s after %s: last answer %s", quote(e.Key), retries(e.Retries), statusLine(e.StatusCode))
	} else {
		fmt.Fprintf(&b, "httplimit: waiting to send to %s", quote(e.Key))
		if e.StatusCode != 0 {
			fmt.Fprintf(&b, " again after %s (%s so far)", statusLine(e.StatusCode), retries(e.Retries))
		}
	}
	if !e.Until.IsZero() {
		fmt.Fprintf(&b, ", paused by the server until %s", e.Until.UTC().Format("2006-01-02T15:04:05.999Z07:00"))
	}
	if e.Err != ErrGaveUp {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *TransportError) Unwrap() error { return e.Err }

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
