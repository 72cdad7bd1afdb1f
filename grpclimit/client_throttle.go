package grpclimit

import (
	"errors"
	"io"
	"math/rand/v2"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/throttle"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrThrottled is what the error of a call Client.Throttle rejected
// matches (errors.Is): the Client sent nothing, because the server refused
// or failed too many of its recent calls under the key. The call's
// *WaitError has the status Unavailable.
var ErrThrottled = errors.New("grpclimit: throttled locally: the server refused or failed too many recent calls")

// throttledError is the Err of a *WaitError for a call Throttle rejected:
// it says with what probability, and why.
type throttledError struct{ d throttle.Decision }

func (e *throttledError) Error() string { return "grpclimit: throttled locally, " + e.d.String() }

func (e *throttledError) Is(target error) bool { return target == ErrThrottled }

// ticket is what one call holds while it is out: its slot of Concurrency
// (the zero Permit if none) and Throttle's decision to send it (the zero
// Decision, which records nothing, without Throttle).
type ticket struct {
	slot    keylimit.Permit
	counted throttle.Decision
}

// throttling returns the Client's adaptive throttling.
func (c *Client) throttling() throttle.Config {
	return throttle.Config{K: c.Throttle, Window: c.ThrottleWindow, MaxKeys: maxPauses}
}

// admit decides whether a call under key goes: without Throttle it does.
// A rejected call is counted; one that goes, when its outcome comes.
func (c *Client) admit(key string) (throttle.Decision, error) {
	cfg := c.throttling()
	if !cfg.On() {
		return throttle.Decision{}, nil
	}
	u := rand.Float64()
	if c.rand != nil {
		u = c.rand()
	}
	d := c.throttle.Admit(key, c.clock().Now(), cfg, u)
	if !d.Send {
		return throttle.Decision{}, &throttledError{d}
	}
	return d, nil
}

// end records the outcome o of a unary call in Throttle and gives back its
// slot, by Drop if o is a failure.
func (c *Client) end(key string, tk ticket, o throttle.Outcome) {
	c.record(key, tk.counted, o)
	releaseSlot(tk.slot, o == throttle.Failed)
}

func (c *Client) record(key string, d throttle.Decision, o throttle.Outcome) {
	if d.Send {
		c.throttle.Record(key, d, o, c.clock().Now(), c.throttling())
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

// releaseSlot gives slot back: by its Drop if drop is set and the Permit
// has one, so that a limiter whose limit adapts hears that the server
// refused or failed; else by Release.
func releaseSlot(slot keylimit.Permit, drop bool) {
	if drop {
		if d, ok := any(slot).(interface{ Drop() }); ok {
			d.Drop()
			return
		}
	}
	slot.Release()
}
