package grpclimit

import (
	"context"
	"errors"

	"github.com/keylimit/keylimit/quota"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// outcome is the quota.Outcome of a call of context ctx whose handler
// returned err, or panicked (ended false): its code, as an int, and
// whether ctx's deadline had passed. The cost the handler reported
// (quota.ReportCost with its context) is the Verdict's to add.
func outcome(ctx context.Context, err error, ended bool) quota.Outcome {
	code := status.Code(err)
	if !ended {
		code = codes.Unknown
	}
	expired := errors.Is(ctx.Err(), context.DeadlineExceeded)
	return quota.Outcome{Status: int(code), Reported: -1, Panicked: !ended, Expired: expired}
}

// outcomeStream is a server stream whose Context carries what
// quota.ReportCost needs (quota.Verdict.Context): the stream a handler
// gets when its call's tier has a policy charged by outcome.
type outcomeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *outcomeStream) Context() context.Context { return s.ctx }
