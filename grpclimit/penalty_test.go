package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A call refused by a keylimit.Penalty's ban is ResourceExhausted with a
// message that says so, and a RetryInfo of the ban's end; no call reaches
// the service meanwhile.
func TestBannedCall(t *testing.T) {
	mock := newMock()
	pen, err := keylimit.NewPenalty[string](newBucket(t, keylimit.PerMinute(1), mock),
		keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	require.NoError(t, err)
	defer pen.Close()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: pen}},
	})
	b := start(t, setup{server: limitedBy(srv)})
	require.Equal(t, []codes.Code{codes.OK}, b.checks(1, "x-api-key", "a"))
	for range 3 {
		refused := b.check(context.Background(), "x-api-key", "a")
		require.Equal(t, codes.ResourceExhausted, refused.code())
		require.Equal(t, `grpclimit: abnormal usage detected: policy "minute" refused too many calls and bans the client, retry in 1h0m0s`,
			status.Convert(refused.err).Message())
		delay, ok := grpclimit.RetryDelay(refused.err)
		require.True(t, ok)
		require.Equal(t, time.Hour, delay)
	}
	require.Equal(t, int32(1), b.unary.Load())
	require.Equal(t, uint64(2), pen.Stats().BanRefused)
}
