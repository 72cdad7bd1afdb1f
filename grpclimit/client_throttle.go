package grpclimit

import (
	"errors"
	"io"
	"math/rand/v2"

	"github.com/keylimit/keylimit/internal/throttle"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrThrottled is what the error of a call Client.Throttle rejected
// matches (errors.Is): the Client sent nothing, because the server refused
// or failed too many of its recent calls under the key. The call's
// *WaitError has the status Unavailable.
var ErrThrottled = errors.New("grpclimit: throttled locally: the server refused or failed too many recent calls")

// throttling returns the Client's adaptive throttling.
func (c *Client) throttling() throttle.Config {
	return throttle.Config{K: c.Throttle, Window: c.ThrottleWindow, MaxKeys: maxPauses}
}

// admit decides whether a call under key goes, and reports whether
// Throttle waits for its outcome: without Throttle it goes, uncounted. A
// rejected call is counted at once; one that goes, when its outcome comes.
func (c *Client) admit(key string) (bool, error) {
	if c.Throttle == 0 {
		return false, nil
	}
	u := rand.Float64()
	if c.rand != nil {
		u = c.rand()
	}
	d := c.throttle.Admit(key, c.clock().Now(), c.throttling(), u)
	if !d.Send {
		return false, &throttle.Rejected{Prefix: "grpclimit: ", Sentinel: ErrThrottled, Decision: d}
	}
	return true, nil
}

// end records the outcome o of a unary call in Throttle and gives back its
// slot, by Drop if o is a failure.
func (c *Client) end(key string, tk throttle.Ticket, o throttle.Outcome) {
	c.record(key, tk.Counted, o)
	throttle.Release(tk.Slot, o == throttle.Failed)
}

func (c *Client) record(key string, counted bool, o throttle.Outcome) {
	if counted {
		c.throttle.Record(key, o, c.clock().Now(), c.throttling())
	}
}

// callOutcome is what the error a call ended with says of the server: none
// (or io.EOF, a stream's end) is an accept; Canceled is the caller giving
// up, not counted; ResourceExhausted and Unavailable (refusals),
// DeadlineExceeded (a timeout), Internal, Unknown and DataLoss are
// failures; any other code is an answer about the call itself, an accept.
func callOutcome(err error) throttle.Outcome {
	if err == nil || err == io.EOF {
		return throttle.Accepted
	}
	switch status.Code(err) {
	case codes.Canceled:
		return throttle.Forgotten
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded,
		codes.Internal, codes.Unknown, codes.DataLoss:
		return throttle.Failed
	}
	return throttle.Accepted
}
