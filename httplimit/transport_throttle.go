package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/keylimit/keylimit/internal/throttle"
)

// ErrThrottled is what the error of a request Transport.Throttle rejected
// matches (errors.Is): the Transport sent nothing, because the partner
// refused or failed too many of its recent requests under the key.
var ErrThrottled = errors.New("httplimit: throttled locally: the partner refused or failed too many recent requests")

// throttling returns the Transport's adaptive throttling.
func (t *Transport) throttling() throttle.Config {
	return throttle.Config{K: t.Throttle, Window: t.ThrottleWindow, MaxKeys: t.maxPaused()}
}

// admit decides whether a send under key goes, and reports whether
// Throttle waits for its outcome: without Throttle it goes, uncounted. A
// rejected send is counted at once; one that goes, when its answer comes.
func (t *Transport) admit(key string) (bool, error) {
	if t.Throttle == 0 {
		return false, nil
	}
	d := t.throttle.Admit(key, t.clock().Now(), t.throttling(), t.random())
	if !d.Send {
		return false, &throttle.Rejected{Prefix: "httplimit: ", Sentinel: ErrThrottled, Decision: d}
	}
	return true, nil
}

// end ends a send that has no body to hold its slot: it records o in
// Throttle and gives the slot back, by Drop if o is a failure.
func (t *Transport) end(key string, tk throttle.Ticket, o throttle.Outcome) {
	t.record(key, tk.Counted, o)
	throttle.Release(tk.Slot, o == throttle.Failed)
}

// hold records the outcome o of the answer resp in Throttle and returns
// its body, made to give the send's slot back when it ends (holdBody).
func (t *Transport) hold(ctx context.Context, key string, tk throttle.Ticket, resp *http.Response, o throttle.Outcome) io.ReadCloser {
	t.record(key, tk.Counted, o)
	return holdBody(ctx, resp.Body, tk.Slot, o == throttle.Failed)
}

func (t *Transport) record(key string, counted bool, o throttle.Outcome) {
	if counted {
		t.throttle.Record(key, o, t.clock().Now(), t.throttling())
	}
}

// answerOutcome is what an answer says of the partner: a failure if it is
// a refusal (Transport.Refused) or a 5xx, an accept otherwise.
func answerOutcome(resp *http.Response, refused bool) throttle.Outcome {
	if refused || resp.StatusCode >= 500 {
		return throttle.Failed
	}
	return throttle.Accepted
}

// sendFailure is what an error of Base says of the partner: nothing if the
// caller cancelled the request (it gave up; the partner may have been
// fine), a failure otherwise: a timeout, a refused or reset connection.
func sendFailure(ctx context.Context) throttle.Outcome {
	if errors.Is(ctx.Err(), context.Canceled) {
		return throttle.Forgotten
	}
	return throttle.Failed
}
