package grpclimit_test

import (
	"context"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A call an adaptive policy sheds ends Unavailable, with RetryInfo and
// grpc-retry-pushback-ms in a Trailers-Only answer; a critical call (from
// Config.Criticality) uses the reserve above the limit; a call that ends
// gives its slot back.
func TestAdaptivePolicyShedsUnavailable(t *testing.T) {
	a, err := keylimit.NewAdaptive[string](keylimit.AIMD(1, 2), keylimit.WithClock(newMock())) // limit 1, critical 2
	require.NoError(t, err)
	defer a.Close()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "capacity", Concurrency: a}},
		Criticality: func(ctx context.Context, _ string) keylimit.Criticality {
			if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-priority")) > 0 {
				return keylimit.Critical
			}
			return keylimit.Default
		},
	})
	b := start(t, setup{server: limitedBy(srv)})
	require.NoError(t, b.check(context.Background(), "x-api-key", "a").err)

	held, r := a.TryAcquire("a", 1) // another call of the key, in flight
	require.True(t, r.Allowed)
	shed := b.check(context.Background(), "x-api-key", "a")
	require.Equal(t, codes.Unavailable, shed.code())
	require.Equal(t, `grpclimit: policy "capacity" is shedding load: the server is short of capacity, retry in 1s`, status.Convert(shed.err).Message())
	delay, ok := grpclimit.RetryDelay(shed.err)
	require.True(t, ok)
	require.Positive(t, delay)
	require.Equal(t, []string{"1000"}, shed.trailer.Get("grpc-retry-pushback-ms"))
	require.Empty(t, shed.header, "Trailers-Only")
	require.Equal(t, [3]uint64{1, 0, 0}, a.Stats().Shed)
	require.NoError(t, b.check(context.Background(), "x-api-key", "a", "x-priority", "critical").err, "a critical call has a reserve")

	held.Release()
	require.NoError(t, b.check(context.Background(), "x-api-key", "a").err)
	require.Equal(t, 1, a.Peek("a").Remaining, "the call gave its slot back")
}
