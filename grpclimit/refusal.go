package grpclimit

import (
	"fmt"
	"strconv"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// pushbackKey is the trailer metadata key of server pushback (gRPC's retry
// design, gRFC A6): a client whose retry policy retries the status waits
// that many milliseconds before it does, and does not retry on a negative
// value.
const pushbackKey = "grpc-retry-pushback-ms"

// refusal returns the error a call refused by d ends with:
// ResourceExhausted, or Unavailable when the limiter could not track the key
// or an adaptive policy shed the call (quota.Decision.Shed: the server is
// full or short of capacity, not the client over its limit), whose message
// says so, and so for a keylimit.Penalty's ban and for a refusal caused only by
// calls in flight (Decision.InFlight), with a google.rpc.RetryInfo
// detail of d.Result.RetryAfter unless the call can never pass; and the
// call's grpc-retry-pushback-ms value (appendPushback). The message and the
// pushback are one string, one allocation.
func refusal(d quota.Decision) (pushback string, err error) {
	r := d.Result
	code := codes.ResourceExhausted
	var buf [128]byte
	b := buf[:0]
	switch {
	case r.Untracked:
		code = codes.Unavailable
		b = append(b, "grpclimit: the server tracks as many clients as it can: try again later"...)
	case d.Shed:
		code = codes.Unavailable
		b = fmt.Appendf(b, "grpclimit: policy %q is shedding load: the server is short of capacity, retry in %v", d.Policy, r.RetryAfter)
	case r.RetryAfter == keylimit.InfDuration:
		b = fmt.Appendf(b, "grpclimit: a call costing %d can never pass policy %q, whose quota is %d", d.Cost, d.Policy, r.Limit)
	case r.Banned:
		b = fmt.Appendf(b, "grpclimit: abnormal usage detected: policy %q refused too many calls and bans the client, retry in %v", d.Policy, r.RetryAfter)
	case d.InFlight:
		b = fmt.Appendf(b, "grpclimit: policy %q is held by calls still in flight, not spent: retry in %v, when one of them may have ended", d.Policy, r.RetryAfter)
	default: // as fmt's %q and %v write them, without boxing the two
		b = append(b, "grpclimit: rate limit exceeded: policy "...)
		b = strconv.AppendQuote(b, d.Policy)
		b = append(append(b, ", retry in "...), r.RetryAfter.String()...)
	}
	n := len(b)
	texts := string(appendPushback(b, r.RetryAfter))
	st := status.New(code, texts[:n])
	if r.RetryAfter > 0 && r.RetryAfter != keylimit.InfDuration {
		// WithDetails fails only for a status with code OK.
		if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); err == nil {
			st = detailed
		}
	}
	return texts[n:], st.Err()
}

// appendPushback appends to b the grpc-retry-pushback-ms value of a call
// refused for d: d in whole milliseconds, rounded up, or -1 (do not retry)
// for a call that can never pass.
func appendPushback(b []byte, d time.Duration) []byte {
	if d == keylimit.InfDuration {
		return append(b, "-1"...)
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return strconv.AppendInt(b, int64(max(ms, 0)), 10)
}
