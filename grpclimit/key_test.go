package grpclimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Each KeyFunc keys a real call as it says: by metadata, by method, and
// joined, with '|' and '\' escaped so that distinct parts never make one key.
func TestKeyFuncs(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  grpclimit.KeyFunc
		md   []string
		want string
	}{
		{"metadata", grpclimit.Metadata("X-API-Key"), []string{"x-api-key", "k1", "x-api-key", "k2"}, "k1"},
		{"method", grpclimit.Method, nil, checkMethod},
		{"joined", grpclimit.Join(grpclimit.Metadata("tenant"), grpclimit.Method), []string{"tenant", `a|b\c`}, `a\|b\\c|` + checkMethod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen decisions
			srv := newServer(t, grpclimit.Config{
				Key:        tc.key,
				Policies:   []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), newMock())}},
				OnDecision: seen.record,
			})
			b := start(t, setup{server: limitedBy(srv)})
			require.NoError(t, b.check(context.Background(), tc.md...).err)
			require.Equal(t, []string{tc.want}, seen.keys())
		})
	}
}

// Join has the error of the first part that cannot key the call.
func TestJoinErrors(t *testing.T) {
	bad := errors.New("bad")
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("tenant", "t"))
	_, err := grpclimit.Join(grpclimit.Metadata("tenant"), grpclimit.Metadata("user"))(ctx, checkMethod)
	require.ErrorIs(t, err, quota.ErrNoKey)
	require.EqualError(t, err, "grpclimit: the call carries no key: no user metadata")
	_, err = grpclimit.Join(func(context.Context, string) (string, error) { return "", bad }, grpclimit.Method)(ctx, checkMethod)
	require.ErrorIs(t, err, bad)
	require.Panics(t, func() { grpclimit.Join() })
	require.Panics(t, func() { grpclimit.Join(grpclimit.Method, nil) })

	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Join(grpclimit.Metadata("tenant"), grpclimit.Metadata("user")),
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), newMock())}},
	})
	b := start(t, setup{server: limitedBy(srv)})
	require.Equal(t, codes.InvalidArgument, b.check(context.Background(), "tenant", "t").code())
}
