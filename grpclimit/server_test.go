package grpclimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A key's calls are admitted up to its burst, with the fields as header
// metadata, and refused after, each with the RetryInfo delay, and the
// pushback and the fields of the refusal as trailer metadata, without a
// header (Trailers-Only, which grpc-go's retry policy retries); the
// refused key passes again exactly when the delay says, not a nanosecond
// before; another key is not affected.
func TestUnaryRefusesWithRetryInfo(t *testing.T) {
	mock := newMock()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(3), mock)}},
	})
	b := start(t, setup{server: limitedBy(srv)})

	first := b.check(context.Background(), "x-api-key", "a")
	require.NoError(t, first.err)
	require.Equal(t, `"minute";q=3;w=60`, first.get("ratelimit-policy"), "ratelimit-policy")
	require.Equal(t, `"minute";r=2;t=20`, first.get("ratelimit"), "ratelimit of the first call")
	require.Empty(t, first.get("retry-after"), "retry-after of an admitted call")
	require.Empty(t, first.trailer.Get("grpc-retry-pushback-ms"), "pushback of an admitted call")
	require.Empty(t, first.trailed("ratelimit"), "an admitted call's fields are in its header")

	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, b.checks(3, "x-api-key", "a"))
	refused := b.check(context.Background(), "x-api-key", "a")
	require.Equal(t, codes.ResourceExhausted, refused.code())
	require.Equal(t, `grpclimit: rate limit exceeded: policy "minute", retry in 20s`, status.Convert(refused.err).Message())
	delay, ok := grpclimit.RetryDelay(refused.err)
	require.True(t, ok, "the refusal has a RetryInfo")
	require.Equal(t, 20*s, delay, "RetryInfo delay")
	require.Empty(t, refused.header, "a refusal sends no header: Trailers-Only")
	require.Equal(t, `"minute";r=0;t=20`, refused.trailed("ratelimit"), "ratelimit of a refusal")
	require.Equal(t, `"minute";q=3;w=60`, refused.trailed("ratelimit-policy"), "ratelimit-policy of a refusal")
	require.Equal(t, "20", refused.trailed("retry-after"), "retry-after")
	require.Equal(t, []string{"20000"}, refused.trailer.Get("grpc-retry-pushback-ms"), "pushback")
	require.Empty(t, refused.trailer.Get("cache-control"), "HTTP's Cache-Control is not sent")
	require.Equal(t, int32(3), b.unary.Load(), "calls that reached the service")

	require.Equal(t, []codes.Code{codes.OK}, b.checks(1, "x-api-key", "b"), "another key")

	mock.Add(20*s - 1)
	late := b.check(context.Background(), "x-api-key", "a")
	delay, _ = grpclimit.RetryDelay(late.err)
	require.Equal(t, time.Duration(1), delay, "a nanosecond before the delay ends")
	require.Equal(t, []string{"1"}, late.trailer.Get("grpc-retry-pushback-ms"), "pushback, rounded up to a millisecond")
	require.Equal(t, "1", late.trailed("retry-after"), "retry-after, rounded up to a second")
	mock.Add(1)
	require.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, b.checks(2, "x-api-key", "a"), "when the delay ends")
	require.Equal(t, int32(5), b.unary.Load(), "calls that reached the service")
}

// On a frozen clock, 60 concurrent calls under one key over a real
// connection: exactly the burst of 10 is admitted and reaches the service.
func TestUnaryConcurrentCallsCountExactly(t *testing.T) {
	mock := newMock()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), mock)}},
	})
	b := start(t, setup{tcp: true, server: limitedBy(srv)})

	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	for range 60 {
		wg.Go(func() {
			c := b.check(context.Background(), "x-api-key", "k").code()
			mu.Lock()
			codesSeen[c]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[codes.Code]int{codes.OK: 10, codes.ResourceExhausted: 50}, codesSeen)
	require.Equal(t, int32(10), b.unary.Load(), "calls that reached the service")
}

// A stream counts once, when it opens: past the quota a stream ends before
// the service sees it, with the same RetryInfo and fields as a unary call,
// Trailers-Only.
// Keyed by method, Check and Watch count apart.
func TestStreamCountsOncePerStream(t *testing.T) {
	mock := newMock()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Method,
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(2), mock)}},
	})
	b := start(t, setup{server: limitedBy(srv)})

	for i := range 2 {
		a := b.watch(t, context.Background())
		require.NoError(t, a.err, "stream %d", i)
		require.Equal(t, `"minute";q=2;w=60`, a.get("ratelimit-policy"), "stream %d", i)
	}
	refused := b.watch(t, context.Background())
	require.Equal(t, codes.ResourceExhausted, refused.code())
	delay, ok := grpclimit.RetryDelay(refused.err)
	require.True(t, ok)
	require.Equal(t, 30*s, delay, "RetryInfo delay")
	require.Empty(t, refused.header, "a refusal sends no header: Trailers-Only")
	require.Equal(t, `"minute";r=0;t=30`, refused.trailed("ratelimit"))
	require.Equal(t, "30", refused.trailed("retry-after"))
	require.Equal(t, []string{"30000"}, refused.trailer.Get("grpc-retry-pushback-ms"))
	require.Equal(t, int32(2), b.streams.Load(), "streams that reached the service")

	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, b.checks(3), "Check counts apart from Watch")
}

// Two policies on one key, all or nothing: each is a member of the fields,
// in order; a call refused by one takes nothing from the other; the
// refusal names the policy that refused and its delay.
func TestPoliciesAllOrNothing(t *testing.T) {
	mock := newMock()
	second := newBucket(t, keylimit.PerSecond(2), mock)
	minute := newBucket(t, keylimit.PerMinute(3), mock)
	srv := newServer(t, grpclimit.Config{
		Key: grpclimit.Method,
		Policies: []quota.Policy{
			{Name: "second", Limiter: second},
			{Name: "minute", Limiter: minute},
		},
	})
	b := start(t, setup{server: limitedBy(srv)})

	require.Equal(t, []codes.Code{codes.OK, codes.OK}, b.checks(2))
	a := b.check(context.Background())
	require.Equal(t, `"second";q=2;w=1, "minute";q=3;w=60`, a.trailed("ratelimit-policy"))
	require.Equal(t, `"second";r=0;t=1, "minute";r=1;t=20`, a.trailed("ratelimit"))
	require.Equal(t, `grpclimit: rate limit exceeded: policy "second", retry in 500ms`, status.Convert(a.err).Message())
	require.Equal(t, 1, minute.Peek(checkMethod).Remaining, "the refused call took nothing from minute")

	mock.Add(s)
	require.Equal(t, []codes.Code{codes.OK}, b.checks(1))
	a = b.check(context.Background())
	require.Equal(t, codes.ResourceExhausted, a.code())
	require.Equal(t, `grpclimit: rate limit exceeded: policy "minute", retry in 19s`, status.Convert(a.err).Message())
	require.Equal(t, 1, second.Peek(checkMethod).Remaining, "the refused call took nothing from second")
	require.Equal(t, int32(3), b.unary.Load())
}

// A call costing more than a quota can never pass: no RetryInfo, and a
// pushback of -1, which tells gRPC's retry not to retry.
func TestCostAboveQuotaNeverPasses(t *testing.T) {
	mock := newMock()
	var seen decisions
	srv := newServer(t, grpclimit.Config{
		Key:        grpclimit.Method,
		Policies:   []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(3), mock)}},
		Cost:       func(context.Context, string) int { return 5 },
		OnDecision: seen.record,
	})
	b := start(t, setup{server: limitedBy(srv)})

	a := b.check(context.Background())
	require.Equal(t, codes.ResourceExhausted, a.code())
	require.Equal(t, `grpclimit: a call costing 5 can never pass policy "minute", whose quota is 3`, status.Convert(a.err).Message())
	_, ok := grpclimit.RetryDelay(a.err)
	require.False(t, ok, "no RetryInfo for a call that can never pass")
	require.Equal(t, []string{"-1"}, a.trailer.Get("grpc-retry-pushback-ms"))
	require.Empty(t, a.trailed("retry-after"))
	require.Equal(t, `"minute";r=3;t=0`, a.trailed("ratelimit"), "nothing was taken")
	require.Equal(t, keylimit.InfDuration, seen.all()[0].Result.RetryAfter)
	require.Equal(t, int32(0), b.unary.Load())
}

// A key the limiter cannot track (its key cap is reached) is the server's
// trouble, not the client's: Unavailable, with the limiter's RetryInfo.
func TestUntrackedKeyIsUnavailable(t *testing.T) {
	mock := newMock()
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(3), mock, keylimit.WithMaxKeys(1))}},
	})
	b := start(t, setup{server: limitedBy(srv)})

	require.Equal(t, []codes.Code{codes.OK}, b.checks(1, "x-api-key", "a"))
	a := b.check(context.Background(), "x-api-key", "b")
	require.Equal(t, codes.Unavailable, a.code())
	require.Equal(t, "grpclimit: the server tracks as many clients as it can: try again later", status.Convert(a.err).Message())
	delay, ok := grpclimit.RetryDelay(a.err)
	require.True(t, ok)
	require.Equal(t, 20*s, delay, "when the tracked key goes idle and its place frees up")
	require.Equal(t, int32(1), b.unary.Load())
}

// A dry run counts and sends the fields, and OnDecision sees the true
// decision, but every call passes, without retry-after.
func TestDryRunRefusesNothing(t *testing.T) {
	mock := newMock()
	var seen decisions
	srv := newServer(t, grpclimit.Config{
		Key:        grpclimit.Method,
		Policies:   []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(1), mock)}},
		DryRun:     true,
		OnDecision: seen.record,
	})
	b := start(t, setup{server: limitedBy(srv)})

	require.Equal(t, []codes.Code{codes.OK, codes.OK}, b.checks(2))
	a := b.check(context.Background())
	require.NoError(t, a.err)
	require.Equal(t, `"minute";r=0;t=60`, a.get("ratelimit"))
	require.Empty(t, a.get("retry-after"))
	var allowed []bool
	for _, d := range seen.all() {
		allowed = append(allowed, d.Result.Allowed)
	}
	require.Equal(t, []bool{true, false, false}, allowed, "the true decisions")
	require.Equal(t, int32(3), b.unary.Load())
}

// FieldsOnRefusal: an admitted call carries no rate-limit metadata, a
// refused one all of it, as without the option.
func TestFieldsOnRefusal(t *testing.T) {
	mock := newMock()
	srv := newServer(t, grpclimit.Config{
		Key:             grpclimit.Method,
		Policies:        []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(1), mock)}},
		FieldsOnRefusal: true,
	})
	b := start(t, setup{server: limitedBy(srv)})

	a := b.check(context.Background())
	require.NoError(t, a.err)
	for _, f := range []string{"ratelimit", "ratelimit-policy", "retry-after"} {
		require.Empty(t, a.get(f)+a.trailed(f), "admitted: %s", f)
	}
	a = b.check(context.Background())
	require.Equal(t, codes.ResourceExhausted, status.Code(a.err))
	require.Equal(t, `"minute";r=0;t=60`, a.trailed("ratelimit"))
	require.Equal(t, `"minute";q=1;w=60`, a.trailed("ratelimit-policy"))
	require.Equal(t, "60", a.trailed("retry-after"))
}

// Skipped calls pass uncounted and without fields; tiers give some
// clients other policies; OnDecision sees the key, tier, policy and cost
// of each call.
func TestSkipTiersAndDecisions(t *testing.T) {
	mock := newMock()
	var seen decisions
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.Metadata("x-api-key"),
		Policies: []quota.Policy{{Name: "free", Limiter: newBucket(t, keylimit.PerMinute(1), mock)}},
		Tier: func(_ context.Context, _, key string) string {
			if key == "vip" {
				return "gold"
			}
			return ""
		},
		Tiers:      map[string][]quota.Policy{"gold": {{Name: "gold", Limiter: newBucket(t, keylimit.PerMinute(100), mock)}}},
		Skip:       func(_ context.Context, method string) bool { return method == watchMethod },
		Cost:       func(context.Context, string) int { return 1 },
		OnDecision: seen.record,
	})
	b := start(t, setup{server: limitedBy(srv)})

	require.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, b.checks(2, "x-api-key", "joe"))
	require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK}, b.checks(3, "x-api-key", "vip"))
	vip := b.check(context.Background(), "x-api-key", "vip")
	require.Equal(t, `"gold";q=100;w=60`, vip.get("ratelimit-policy"))

	w := b.watch(t, context.Background()) // skipped: no key needed
	require.NoError(t, w.err)
	require.Empty(t, w.get("ratelimit"), "a skipped call has no fields")

	ds := seen.all()
	require.Len(t, ds, 6, "decisions: skipped calls are not decisions")
	require.Positive(t, ds[1].Elapsed, "the decision's time is measured")
	require.Equal(t, quota.Decision{Key: "joe", Tier: "", Cost: 1, Policy: "free", Result: ds[1].Result, Elapsed: ds[1].Elapsed}, ds[1])
	require.False(t, ds[1].Result.Allowed)
	require.Equal(t, "gold", ds[2].Tier)
	require.Equal(t, "gold", ds[2].Policy)
}

// Calls that cannot be keyed are never counted: quota.ErrNoKey is the client's
// fault (InvalidArgument, with the reason); any other error the server's
// (Internal, with a generic text); Config.Error can answer otherwise, or
// let the call through uncounted.
func TestCallsWithoutKey(t *testing.T) {
	mock := newMock()
	lim := newBucket(t, keylimit.PerMinute(1), mock)
	policies := []quota.Policy{{Name: "minute", Limiter: lim}}
	bad := errors.New("the key store is down")

	t.Run("default", func(t *testing.T) {
		srv := newServer(t, grpclimit.Config{Key: grpclimit.Metadata("X-API-Key"), Policies: policies})
		b := start(t, setup{server: limitedBy(srv)})
		a := b.check(context.Background())
		require.Equal(t, codes.InvalidArgument, a.code())
		require.Equal(t, "grpclimit: the call carries no key: no x-api-key metadata", status.Convert(a.err).Message())
		require.Empty(t, a.get("ratelimit"))
		require.Equal(t, codes.InvalidArgument, b.check(context.Background(), "x-api-key", "").code(), "an empty value")

		srv = newServer(t, grpclimit.Config{Key: func(context.Context, string) (string, error) { return "", bad }, Policies: policies})
		b = start(t, setup{server: limitedBy(srv)})
		a = b.check(context.Background())
		require.Equal(t, codes.Internal, a.code())
		require.Equal(t, "grpclimit: the server cannot decide the call's rate limit", status.Convert(a.err).Message())

		srv = newServer(t, grpclimit.Config{Key: func(context.Context, string) (string, error) { return "", nil }, Policies: policies})
		b = start(t, setup{server: limitedBy(srv)})
		require.Equal(t, codes.Internal, b.check(context.Background()).code(), "an empty key without an error")

		srv = newServer(t, grpclimit.Config{Key: grpclimit.Method, Policies: policies, Cost: func(context.Context, string) int { return -1 }})
		b = start(t, setup{server: limitedBy(srv)})
		require.Equal(t, codes.Internal, b.check(context.Background()).code(), "a negative cost")
		require.Equal(t, int32(0), b.unary.Load())
	})

	t.Run("Config.Error", func(t *testing.T) {
		var mu sync.Mutex
		var got []error
		srv := newServer(t, grpclimit.Config{
			Key:      grpclimit.Metadata("x-api-key"),
			Policies: policies,
			Error: func(_ context.Context, method string, err error) error {
				mu.Lock()
				got = append(got, err)
				mu.Unlock()
				if method == watchMethod {
					return status.Error(codes.Unauthenticated, "who are you?")
				}
				return nil
			},
		})
		b := start(t, setup{server: limitedBy(srv)})
		require.Equal(t, []codes.Code{codes.OK, codes.OK, codes.OK}, b.checks(3), "let through, uncounted")
		require.Equal(t, 1, lim.Peek("").Remaining, "nothing was counted")
		w := b.watch(t, context.Background())
		require.Equal(t, codes.Unauthenticated, w.code())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 4)
		require.ErrorIs(t, got[0], quota.ErrNoKey)
		require.Equal(t, int32(3), b.unary.Load())
	})
}

// A Config that cannot work is an error from NewServer that says why.
func TestNewServerErrors(t *testing.T) {
	lim := newBucket(t, keylimit.PerMinute(1), newMock())
	for _, tc := range []struct {
		c    grpclimit.Config
		want string
	}{
		{grpclimit.Config{Policies: []quota.Policy{{Name: "m", Limiter: lim}}},
			"grpclimit: Config.Key is nil: say what to key calls by, e.g. grpclimit.ClientIP{}.Key"},
		{grpclimit.Config{Key: grpclimit.Method},
			"grpclimit: Config.Policies is empty: give at least one Policy"},
		{grpclimit.Config{Key: grpclimit.Method, Policies: []quota.Policy{{Name: "m", Limiter: lim}},
			Tier: func(context.Context, string, string) string { return "" }},
			"grpclimit: Config.Tier and Config.Tiers go together: set both or neither"},
		{grpclimit.Config{Key: grpclimit.Method, Policies: []quota.Policy{quota.Bucket("m", keylimit.Limit{})}},
			`grpclimit: policy "m": keylimit: `},
		{grpclimit.Config{Key: grpclimit.Method, Policies: []quota.Policy{{Name: "m"}}},
			`grpclimit: policy "m" has no Limiter`},
	} {
		_, err := grpclimit.NewServer(tc.c)
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
	}
}
