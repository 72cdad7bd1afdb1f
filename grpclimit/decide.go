package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/keylimit/keylimit/internal/bounded"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc/metadata"
)

// wasHTTP is in the text of the errors of calls that cannot be decided,
// and of Configs that cannot work, where it has been since calls were
// decided by httplimit's middleware: an error's text is behaviour, kept
// until a change says otherwise in the CHANGELOG.
const wasHTTP = "httplimit: "

var (
	// errEmptyKey is the error for a KeyFunc that returned an empty key and
	// no error: counting every such call against one key "" would make
	// them all one client.
	errEmptyKey = errors.New(wasHTTP + "the KeyFunc returned an empty key without an error")
	// errEnded is wrapped, with the context's error, by the error of a call
	// whose context ended before its rate limit was decided.
	errEnded = errors.New(wasHTTP + "the request ended before its rate limit was decided")
	// clientIPNoKey is what the errors of ClientIP for metadata it cannot
	// read wrap: ErrNoKey's kind.
	clientIPNoKey = quota.NoKey(wasHTTP + "the request carries no key")
)

// decide decides the call to method under ctx, as quota decides: the key,
// the tier and the cost of the call, then the Decider. It returns the
// Verdict (for Finish, once the handler has returned), the header metadata
// to send (nil if none: a skipped call, one that could not be decided), and
// the error the call ends with before its handler: its refusal, or what
// Config.Error makes of a call that cannot be decided; nil if the handler
// is to run.
func (s *Server) decide(ctx context.Context, method string) (v quota.Verdict, header metadata.MD, err error) {
	if s.skip != nil && s.skip(ctx, method) {
		return v, nil, nil
	}
	var start time.Time
	if s.onDecision != nil {
		start = time.Now()
	}
	key, err := s.key(ctx, method)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return v, nil, s.fail(ctx, method, err)
	}
	tier := ""
	if s.tierOf != nil {
		tier = s.tierOf(ctx, method, key)
	}
	cost := 1
	if s.cost != nil {
		if cost = s.cost(ctx, method); cost < 0 {
			return v, nil, s.fail(ctx, method, fmt.Errorf("%sCost returned %d for %s: a cost is at least 0", wasHTTP, cost, bounded.Quote("POST "+method)))
		}
	}
	// The cost is not negative: Decide's only error is the context's, of a
	// call whose client has gone (before or while it was decided).
	if v, err = s.quota.Decide(ctx, key, tier, cost); err != nil {
		return v, nil, s.fail(ctx, method, fmt.Errorf("%w: %w", errEnded, err))
	}
	d := &v.Decision
	if s.onDecision != nil {
		d.Elapsed = time.Since(start)
	}
	if v.Action() == quota.Fail {
		// Not the client's doing: the policy cannot be applied to its key.
		return v, nil, s.fail(ctx, method, fmt.Errorf("%spolicy %q cannot limit key %s: %w", wasHTTP, d.Policy, bounded.Quote(key), d.Result.Err))
	}
	header = fields(&v)
	if s.onDecision != nil {
		s.onDecision(ctx, method, *d)
	}
	if v.Action() == quota.Refuse {
		return v, header, refusal(*d)
	}
	return v, header, nil
}

// fields returns the rate-limit fields of a counted call as header
// metadata, under the lower-case keys of their HTTP names: ratelimit,
// ratelimit-policy, and retry-after in whole seconds for a refusal that can
// pass. The values share one allocated array.
func fields(v *quota.Verdict) metadata.MD {
	vals := new([3]string)
	vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
	md := metadata.MD{"ratelimit": vals[0:1:1], "ratelimit-policy": vals[1:2:2]}
	if secs, ok := v.Decision.RetryAfterSeconds(); ok && v.Action() == quota.Refuse {
		vals[2] = strconv.FormatInt(secs, 10)
		md["retry-after"] = vals[2:3:3]
	}
	return md
}
