package grpclimit

import (
	"context"
	"errors"
	"fmt"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config configures the server interceptors. Key and Policies are required;
// everything else is optional, and its zero value is the usual choice. The
// fields mean what httplimit.Config's of the same names mean, for a call
// instead of a request: both are read by a quota.Decider.
type Config struct {
	// Key names the client a call counts against: ClientIP{}.Key,
	// Metadata("x-api-key"), Method, Join(ClientIP{}.Key, Method), or your
	// own. A call it cannot key is answered by Error, never counted against
	// a shared key.
	Key KeyFunc

	// Policies are the quotas every call meets, all at once: a call passes
	// only if every policy admits it, and a refused call takes nothing from
	// any. With Tiers, they are the default tier.
	Policies []quota.Policy

	// Tier, with Tiers, gives clients different quotas: a call whose Tier
	// is a key of Tiers meets those policies instead of Policies.
	Tier  func(ctx context.Context, method, key string) string
	Tiers map[string][]quota.Policy

	// Cost is how much of each quota a call takes: 1 if Cost is nil. A cost
	// of 0 passes without taking anything; one above a policy's quota can
	// never pass (ResourceExhausted without RetryInfo); a negative one is a
	// programming error, answered by Error.
	Cost func(ctx context.Context, method string) int

	// Skip exempts the calls it returns true for: they pass without a key,
	// a count or rate-limit metadata (health checks, reflection).
	Skip func(ctx context.Context, method string) bool

	// Criticality says how much a call matters to an adaptive concurrency
	// policy (adaptive.Limiter in quota.Policy.Concurrency), which sheds
	// Sheddable calls first and Critical ones last. nil leaves the
	// criticality the call's context carries (keylimit.WithCriticality, set
	// by an earlier interceptor), Default if none. It is read for the
	// decision only.
	Criticality func(ctx context.Context, method string) keylimit.Criticality

	// DryRun counts every call and sends the metadata as usual, and calls
	// OnDecision with the true decision, but lets refused calls through.
	DryRun bool

	// FieldsOnRefusal sends the rate-limit metadata (ratelimit,
	// ratelimit-policy) with refused calls only: an admitted call's
	// response carries none, and deciding it allocates nothing for them.
	// Clients then learn of the quota only when refused. A dry run sends
	// them with the calls it would have refused.
	FieldsOnRefusal bool

	// OnDecision, if set, is called with every decision, before the
	// handler runs or the call is refused. It runs on the call's goroutine
	// and must be safe for concurrent use.
	OnDecision func(ctx context.Context, method string, d quota.Decision)

	// Error answers the calls the interceptor cannot decide: their key
	// cannot be determined, Cost returned a negative number, or a policy's
	// limiter could not apply its limit to the key. It returns the error the
	// call ends with, or nil to let the call through uncounted. If Error is
	// nil, an error that wraps quota.ErrNoKey (as httplimit's key errors do, of the same
	// kind) ends the call with InvalidArgument and its text, any other with
	// Internal and a generic text: the server's details stay out of the
	// answer.
	Error func(ctx context.Context, method string, err error) error
}

// Server holds the server interceptors of one Config, a unary and a stream
// one that share its limiters; it is safe for concurrent use. Each call
// (each stream, once, when it opens) takes its cost from the policies of its
// tier under its key. An admitted call goes on to the handler; a refused one
// ends with ResourceExhausted, a google.rpc.RetryInfo detail of the delay
// after which it can pass (see RetryDelay), and that delay in milliseconds
// as grpc-retry-pushback-ms trailer metadata. Either way the call carries
// the IETF rate-limit fields as httplimit sends them, as header metadata if
// admitted, as trailer metadata if refused (with no header: Trailers-Only,
// which gRPC's retry policy retries after the pushback):
//
//	ratelimit-policy: "minute";q=10;w=60
//	ratelimit: "minute";r=0;t=42
//	retry-after: 6                       (refused calls only)
//
// A concurrency policy (quota.Concurrent) holds its slot until the handler
// returns, a stream's when the stream ends. A policy charged by outcome
// (quota.Policy.Charge) is charged when the handler returns, by the code it
// returned (quota.Outcome.Status, codes.Code as an int) and the cost it
// reported with quota.ReportCost and its context (a stream's Context).
type Server struct {
	quota      *quota.Decider
	key        KeyFunc
	tierOf     func(ctx context.Context, method, key string) string
	cost       func(ctx context.Context, method string) int
	critical   func(ctx context.Context, method string) keylimit.Criticality
	skip       func(ctx context.Context, method string) bool
	onDecision func(ctx context.Context, method string, d quota.Decision)
	fail       func(ctx context.Context, method string, err error) error
}

// NewServer returns the interceptors that limit calls as c says. It returns
// an error if c is incomplete or a policy is invalid.
func NewServer(c Config) (*Server, error) {
	if c.Key == nil {
		return nil, errors.New("grpclimit: Config.Key is nil: say what to key calls by, e.g. grpclimit.ClientIP{}.Key")
	}
	if (c.Tier == nil) != (len(c.Tiers) == 0) {
		return nil, errors.New("grpclimit: Config.Tier and Config.Tiers go together: set both or neither")
	}
	q, err := quota.New(quota.Config{Policies: c.Policies, Tiers: c.Tiers, DryRun: c.DryRun, FieldsOnRefusal: c.FieldsOnRefusal})
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", errors.Unwrap(err))
	}
	s := &Server{
		quota: q, key: c.Key, tierOf: c.Tier, cost: c.Cost, critical: c.Criticality, skip: c.Skip,
		onDecision: c.OnDecision, fail: c.Error,
	}
	if s.fail == nil {
		s.fail = defaultError
	}
	return s, nil
}

// UnaryInterceptor returns the interceptor that limits unary calls:
// grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryInterceptor())).
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		// Finish holds nothing for a call that does not proceed; deferred
		// first, it gives back what one holds (a concurrency policy's slot)
		// however the call ends, OnDecision or the handler panicking.
		var v quota.Verdict
		defer v.Finish()
		md, err := s.decide(ctx, info.FullMethod, &v)
		// An error from SetHeader or SetTrailer means ctx is not a server
		// call's (a handler called directly): there is nowhere to send the
		// fields.
		if err != nil {
			if md != nil {
				_ = grpc.SetTrailer(ctx, md)
			}
			return nil, err
		}
		if md != nil {
			_ = grpc.SetHeader(ctx, md)
		}
		if v.NeedsOutcome() {
			ended := false
			defer func() { v.FinishWith(outcome(ctx, err, ended)) }()
			resp, err = handler(v.Context(ctx), req)
			ended = true
			return resp, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor returns the interceptor that limits streams, each once
// when it opens, with its cost; the messages on an admitted stream are not
// counted: grpc.NewServer(grpc.ChainStreamInterceptor(s.StreamInterceptor())).
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		var v quota.Verdict
		defer v.Finish() // when the stream has ended: its handler has returned
		md, err := s.decide(ss.Context(), info.FullMethod, &v)
		if err != nil {
			if md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		if md != nil {
			_ = ss.SetHeader(md)
		}
		if v.NeedsOutcome() {
			ended := false
			defer func() { v.FinishWith(outcome(ss.Context(), err, ended)) }()
			err = handler(srv, &outcomeStream{ss, v.Context(ss.Context())})
			ended = true
			return err
		}
		return handler(srv, ss)
	}
}

// errInternal is the answer to a call that could not be decided for a
// reason of the server's.
var errInternal = status.Error(codes.Internal, "grpclimit: the server cannot decide the call's rate limit")

// defaultError is Config.Error when it is nil.
func defaultError(_ context.Context, _ string, err error) error {
	if errors.Is(err, quota.ErrNoKey) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return errInternal
}
