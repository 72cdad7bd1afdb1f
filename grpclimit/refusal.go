package grpclimit

import (
	"fmt"
	"strconv"
	"time"

	"github.com/keylimit/keylimit"
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

// refusal is the error a call refused by d ends with: ResourceExhausted, or
// Unavailable when the limiter could not track the key (the server is full,
// not the client over its limit), whose message says so, and so for a
// keylimit.Penalty's ban, with a google.rpc.RetryInfo detail of
// d.Result.RetryAfter unless the call can never pass.
func refusal(d Decision) error {
	r := d.Result
	code := codes.ResourceExhausted
	var msg string
	switch {
	case r.Untracked:
		code = codes.Unavailable
		msg = "grpclimit: the server tracks as many clients as it can: try again later"
	case r.RetryAfter == keylimit.InfDuration:
		msg = fmt.Sprintf("grpclimit: a call costing %d can never pass policy %q, whose quota is %d", d.Cost, d.Policy, r.Limit)
	case r.Banned:
		msg = fmt.Sprintf("grpclimit: abnormal usage detected: policy %q refused too many calls and bans the client, retry in %v", d.Policy, r.RetryAfter)
	default:
		msg = fmt.Sprintf("grpclimit: rate limit exceeded: policy %q, retry in %v", d.Policy, r.RetryAfter)
	}
	st := status.New(code, msg)
	if r.RetryAfter > 0 && r.RetryAfter != keylimit.InfDuration {
		// WithDetails fails only for a status with code OK.
		if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(r.RetryAfter)}); err == nil {
			st = detailed
		}
	}
	return st.Err()
}

// pushbackValue is d in whole milliseconds, rounded up, or -1 (do not
// retry) for a call that can never pass.
func pushbackValue(d time.Duration) string {
	if d == keylimit.InfDuration {
		return "-1"
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return strconv.FormatInt(int64(max(ms, 0)), 10)
}
