package grpclimit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
)

// TestRefillAfterInMetadata re-measures issue 23's table in gRPC metadata:
// t is the seconds until one more call passes (1 s before it, refused; at
// it, admitted), never beyond w, and retry-after is never earlier. Before
// issue 23, t was until the quota is whole: 5, 3, 60, 55, 110 and 55.
func TestRefillAfterInMetadata(t *testing.T) {
	type step struct {
		at time.Duration
		n  int
	}
	for _, row := range []struct {
		name      string
		new       func(keylimit.Limit, ...keylimit.Option) (keylimit.Limiter[string], error)
		limit     keylimit.Limit
		steps     []step // taken from the limiter; then one call at the last's time
		rateLimit string
		retry     string // "": admitted
	}{
		{"TokenBucket PerSecond(1).WithBurst(5), drained", bucket, keylimit.PerSecond(1).WithBurst(5),
			[]step{{0, 5}, {0, 0}}, `"p";r=0;t=1`, "1"},
		{"TokenBucket PerSecond(1).WithBurst(5), admitted with 2 left", bucket, keylimit.PerSecond(1).WithBurst(5),
			[]step{{0, 2}, {0, 0}}, `"p";r=2;t=1`, ""},
		{"TokenBucket PerMinute(10), drained", bucket, keylimit.PerMinute(10),
			[]step{{0, 10}, {0, 0}}, `"p";r=0;t=6`, "6"},
		{"SlidingWindow PerMinute(10)", sliding, keylimit.PerMinute(10),
			[]step{{0, 5}, {40 * time.Second, 5}, {45 * time.Second, 0}}, `"p";r=0;t=15`, "15"},
		{"SlidingCounter PerMinute(10)", counter, keylimit.PerMinute(10),
			[]step{{50 * time.Second, 10}, {70 * time.Second, 0}}, `"p";r=0;t=2`, ""},
		{"FixedWindow PerMinute(10)", fixed, keylimit.PerMinute(10),
			[]step{{5 * time.Second, 10}, {5 * time.Second, 0}}, `"p";r=0;t=55`, "55"},
	} {
		t.Run(row.name, func(t *testing.T) {
			mock := newMock()
			t0 := mock.Now()
			lim, err := row.new(row.limit, keylimit.WithClock(mock))
			require.NoError(t, err)
			srv := newServer(t, grpclimit.Config{Key: grpclimit.Method, Policies: []quota.Policy{{Name: "p", Limiter: lim}}})
			b := start(t, setup{server: limitedBy(srv)})
			for _, st := range row.steps {
				mock.Set(t0.Add(st.at))
				if st.n > 0 {
					require.True(t, lim.AllowN(checkMethod, st.n))
				}
			}
			last := row.steps[len(row.steps)-1].at
			a := b.check(context.Background())
			field := a.get("ratelimit")
			if row.retry != "" {
				require.Equal(t, codes.ResourceExhausted, a.code())
				field = a.trailed("ratelimit")
				require.Equal(t, row.retry, a.trailed("retry-after"))
			} else {
				require.Equal(t, codes.OK, a.code())
			}
			require.Equal(t, row.rateLimit, field)
			secs, err := strconv.Atoi(field[strings.LastIndex(field, "t=")+2:])
			require.NoError(t, err)
			tt := time.Duration(secs) * time.Second
			require.LessOrEqual(t, tt, row.limit.Period, "t is at most w")
			if row.retry != "" {
				mock.Set(t0.Add(last + tt - time.Second))
				require.Equal(t, codes.ResourceExhausted, b.check(context.Background()).code(), "t−1 s")
			}
			mock.Set(t0.Add(last + tt))
			require.Equal(t, codes.OK, b.check(context.Background()).code(), "at t")
		})
	}
}

func bucket(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewTokenBucket[string](l, opts...)
}

func sliding(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewSlidingWindow[string](l, opts...)
}

func counter(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewSlidingCounter[string](l, opts...)
}

func fixed(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewFixedWindow[string](l, opts...)
}

// A Client that follows the RateLimit metadata, after the call that leaves
// a PerMinute(10) bucket with r=0;t=6, pauses 6 s, the server's real wait,
// not the minute the bucket takes to be whole, and the next call passes.
// Without FollowRateLimit it is sent at once, and refused.
func TestClientFollowsRateLimit(t *testing.T) {
	for _, follow := range []bool{true, false} {
		mock := newMock()
		auto := autoClock{mock} // time passes as the client waits
		srv := newServer(t, grpclimit.Config{
			Key:      grpclimit.Method,
			Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), mock)}},
		})
		b := start(t, setup{mock: mock, server: limitedBy(srv), client: pacedBy(&grpclimit.Client{Clock: auto, FollowRateLimit: follow})})
		for i := range 9 {
			require.Equal(t, codes.OK, b.check(context.Background()).code(), "call %d", i)
		}
		tenth := b.check(context.Background())
		require.Equal(t, `"minute";r=0;t=6`, tenth.get("ratelimit"))
		eleventh := b.check(context.Background())
		if follow {
			require.Equal(t, codes.OK, eleventh.code(), "after the pause")
			require.Equal(t, 6*time.Second, b.since()[10], "the 11th arrives when the next token does")
		} else {
			require.Equal(t, codes.ResourceExhausted, eleventh.code(), "not following: sent at once")
			require.Len(t, b.since(), 10, "the 11th is refused before the service")
		}
	}
}
