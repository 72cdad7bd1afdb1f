package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/bounded"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc/metadata"
)

var (
	// errEmptyKey is the error for a KeyFunc that returned an empty key and
	// no error: counting every such call against one key "" would make
	// them all one client.
	errEmptyKey = errors.New("grpclimit: the KeyFunc returned an empty key without an error")
	// errEnded is wrapped, with the context's error, by the error of a call
	// whose context ended before its rate limit was decided.
	errEnded = errors.New("grpclimit: the call ended before its rate limit was decided")
)

// decide decides the call to method under ctx, as quota decides: the key,
// the tier and the cost of the call, then the Decider. It writes the
// Verdict into *v (for Finish, which the caller has deferred already, so
// that a panic of OnDecision releases what it holds), and returns the
// metadata to send
// (nil if none: a skipped call, one that could not be decided), and the
// error the call ends with before its handler: its refusal, or what
// Config.Error makes of a call that cannot be decided; nil if the handler
// is to run. The metadata is the header of a call that goes on to its
// handler, and the trailer of a refused one (see fields).
func (s *Server) decide(ctx context.Context, method string, v *quota.Verdict) (md metadata.MD, err error) {
	if s.skip != nil && s.skip(ctx, method) {
		return nil, nil
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
		return nil, s.fail(ctx, method, err)
	}
	tier := ""
	if s.tierOf != nil {
		tier = s.tierOf(ctx, method, key)
	}
	cost := 1
	if s.cost != nil {
		if cost = s.cost(ctx, method); cost < 0 {
			return nil, s.fail(ctx, method, fmt.Errorf("grpclimit: Cost returned %d for %s: a cost is at least 0", cost, bounded.Quote(method)))
		}
	}
	// The cost is not negative: Decide's only error is the context's, of a
	// call whose client has gone (before or while it was decided).
	dctx := ctx
	if s.critical != nil {
		dctx = keylimit.WithCriticality(ctx, s.critical(ctx, method))
	}
	if *v, err = s.quota.Decide(dctx, key, tier, cost); err != nil {
		return nil, s.fail(ctx, method, fmt.Errorf("%w: %w", errEnded, err))
	}
	d := &v.Decision
	if s.onDecision != nil {
		d.Elapsed = time.Since(start)
	}
	if v.Action() == quota.Fail {
		// Not the client's doing: the policy cannot be applied to its key.
		return nil, s.fail(ctx, method, fmt.Errorf("grpclimit: policy %q cannot limit key %s: %w", d.Policy, bounded.Quote(key), d.Result.Err))
	}
	var pushback string
	var refused error
	if v.Action() == quota.Refuse {
		pushback, refused = refusal(*d)
	}
	if v.RateLimitPolicy() != "" { // all but an admission under Config.FieldsOnRefusal
		md = fields(v, pushback)
	}
	if s.onDecision != nil {
		s.onDecision(ctx, method, *d)
	}
	return md, refused
}

// fields returns the rate-limit fields of a counted call as metadata,
// under the lower-case keys of their HTTP names: ratelimit and
// ratelimit-policy; for a refused call also retry-after, in whole seconds,
// if the call can pass later, and grpc-retry-pushback-ms. The values share
// one allocated array.
//
// A refused call's metadata is its trailer, and it sends no header: gRPC
// then answers Trailers-Only, the only refusal grpc-go's retry policy
// retries (gRFC A6: a response with headers has been committed to).
// pushback is a refused call's grpc-retry-pushback-ms value (see refusal).
func fields(v *quota.Verdict, pushback string) metadata.MD {
	if v.Action() != quota.Refuse {
		vals := new([2]string)
		vals[0], vals[1] = v.RateLimit(), v.RateLimitPolicy()
		return metadata.MD{"ratelimit": vals[0:1:1], "ratelimit-policy": vals[1:2:2]}
	}
	vals := new([4]string)
	vals[0], vals[1], vals[2] = v.RateLimit(), v.RateLimitPolicy(), pushback
	md := metadata.MD{"ratelimit": vals[0:1:1], "ratelimit-policy": vals[1:2:2], pushbackKey: vals[2:3:3]}
	if ra := v.RetryAfter(); ra != "" { // a part of RateLimit's string, not one of its own
		vals[3] = ra
		md["retry-after"] = vals[3:4:4]
	}
	return md
}
