package quota_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// Two policies on one key, all or nothing, step by step on a frozen clock:
// each request is one member of each field, in order; the binding policy is
// the one with the least Remaining when admitted, the one that refused when
// refused; a request refused by one takes nothing from the other.
func TestDecideAllOrNothing(t *testing.T) {
	mock := clock.NewMock()
	second := newBucket(t, keylimit.PerSecond(2), mock)
	minute := newBucket(t, keylimit.PerMinute(3), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "second", Limiter: second}, {Name: "minute", Limiter: minute}}})
	const policy = `"second";q=2;w=1, "minute";q=3;w=60`
	for i, step := range []struct {
		advance int // seconds, before the request
		want    decided
	}{
		{0, decided{quota.Proceed, "second", `"second";r=1;t=1, "minute";r=2;t=20`, policy, ""}},
		// t is until the next token (issue 23): minute's is 20 s away
		// whatever it holds, until the clock moves.
		{0, decided{quota.Proceed, "second", `"second";r=0;t=1, "minute";r=1;t=20`, policy, ""}},
		{0, decided{quota.Refuse, "second", `"second";r=0;t=1, "minute";r=1;t=20`, policy, "1"}},
		{1, decided{quota.Proceed, "minute", `"second";r=1;t=1, "minute";r=0;t=19`, policy, ""}},
		{0, decided{quota.Refuse, "minute", `"second";r=1;t=1, "minute";r=0;t=19`, policy, "19"}},
	} {
		mock.Add(time.Duration(step.advance) * s)
		got, _ := decide(t, d, "k", "", 1)
		require.Equal(t, step.want, got, "step %d", i)
	}
	require.Equal(t, 1, second.Peek("k").Remaining, "the last refusal gave back what second took")
}

// ViolatedPolicies names the policies a refused request could not pass, in
// the tier's order: the one that refused, and the others it would not have
// passed either; none for an admitted request; the would-be refusers in a
// dry run.
func TestViolatedPolicies(t *testing.T) {
	mock := clock.NewMock()
	policies := func() []quota.Policy {
		return []quota.Policy{
			{Name: "second", Limiter: newBucket(t, keylimit.PerSecond(2), mock)},
			{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(3), mock)},
			{Name: "hour", Limiter: newBucket(t, keylimit.PerHour(100), mock)},
		}
	}
	for _, dryRun := range []bool{false, true} {
		d := newDecider(t, quota.Config{Policies: policies(), DryRun: dryRun})
		var got [][]string
		for _, step := range []struct {
			advance time.Duration
			cost    int
		}{
			{0, 2},   // admitted: second 0, minute 1 left
			{0, 1},   // refused by second; minute could pass it
			{s, 2},   // second has 2 again, minute 1: refused by minute alone
			{s, 200}, // beyond hour's quota: never; second and minute short too
		} {
			mock.Add(step.advance)
			v, err := d.Decide(context.Background(), "k", "", step.cost)
			require.NoError(t, err)
			got = append(got, v.AppendViolatedPolicies(nil))
			var room [4]string
			dst := append(room[:0], "before")
			require.Equal(t, append([]string{"before"}, v.AppendViolatedPolicies(nil)...), v.AppendViolatedPolicies(dst), "dry run %v", dryRun)
			require.Zero(t, testing.AllocsPerRun(10, func() { v.AppendViolatedPolicies(room[:0]) }), "into room enough")
		}
		require.Equal(t, [][]string{nil, {"second"}, {"minute"}, {"second", "minute", "hour"}}, got, "dry run %v", dryRun)
		mock.Add(time.Hour)
	}
	var zero quota.Verdict
	require.Nil(t, zero.AppendViolatedPolicies(nil))
}

// The binding policy of a refusal, and what the Decision says of it: the
// policy the cost can never pass before one that is only short now, even
// when All stopped at the one short now; an untracked key; a limiter that
// cannot apply the key's limit (Fail, or Proceed in a dry run).
func TestDecideBindingPolicy(t *testing.T) {
	mock := clock.NewMock()

	wide := newBucket(t, keylimit.PerMinute(5), mock)
	narrow := newBucket(t, keylimit.PerMinute(3), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "wide", Limiter: wide}, {Name: "narrow", Limiter: narrow}}})
	got, dec := decide(t, d, "k", "", 3)
	require.Equal(t, quota.Proceed, got.action)
	require.Equal(t, "narrow", dec.Policy, "the least Remaining: 0 of narrow's, 2 of wide's")
	got, dec = decide(t, d, "k", "", 4) // wide is short (2 left), narrow never admits 4
	require.Equal(t, quota.Refuse, got.action)
	require.Equal(t, "narrow", dec.Policy, "the policy the cost can never pass")
	require.Equal(t, keylimit.InfDuration, dec.Result.RetryAfter)
	require.Empty(t, got.retryAfter, "no Retry-After for a request that can never pass")
	require.Equal(t, 2, wide.Peek("k").Remaining, "wide gave back nothing it did not take")

	capped := newBucket(t, keylimit.PerMinute(3), mock, keylimit.WithMaxKeys(1))
	d = newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "capped", Limiter: capped}}})
	decide(t, d, "a", "", 1)
	got, dec = decide(t, d, "b", "", 1)
	require.Equal(t, quota.Refuse, got.action)
	require.True(t, dec.Result.Untracked, "a key the cap left untracked")

	broken := errors.New("the key's limit is invalid")
	failing := &scripted{result: keylimit.Result{Limit: 5, Remaining: 5, Err: broken}}
	for _, dryRun := range []bool{false, true} {
		d = newDecider(t, quota.Config{
			Policies: []quota.Policy{{Name: "ok", Limiter: newBucket(t, keylimit.PerMinute(9), mock)}, {Name: "failing", Limiter: failing}},
			DryRun:   dryRun,
		})
		got, dec = decide(t, d, "k", "", 1)
		want := quota.Fail
		if dryRun {
			want = quota.Proceed
		}
		require.Equal(t, want, got.action, "dry run %v", dryRun)
		require.Equal(t, "failing", dec.Policy)
		require.False(t, dec.Result.Allowed)
		require.ErrorIs(t, dec.Result.Err, broken)
		require.Equal(t, keylimit.InfDuration, dec.Result.RetryAfter)
	}
}

// A dry run counts as usual and says the true decision, but every request
// proceeds.
func TestDecideDryRun(t *testing.T) {
	mock := clock.NewMock()
	lim := newBucket(t, keylimit.PerMinute(1), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "minute", Limiter: lim}}, DryRun: true})
	var allowed []bool
	for range 3 {
		got, dec := decide(t, d, "k", "", 1)
		require.Equal(t, quota.Proceed, got.action)
		require.Equal(t, `"minute";r=0;t=60`, got.rateLimit)
		require.Empty(t, got.retryAfter, "a dry run sends no Retry-After")
		allowed = append(allowed, dec.Result.Allowed)
	}
	require.Equal(t, []bool{true, false, false}, allowed)
}

// A tier named in Config.Tiers meets its own policies; any other name, ""
// included, meets Config.Policies.
func TestDecideTiers(t *testing.T) {
	mock := clock.NewMock()
	d := newDecider(t, quota.Config{
		Policies: []quota.Policy{{Name: "free", Limiter: newBucket(t, keylimit.PerMinute(1), mock)}},
		Tiers:    map[string][]quota.Policy{"gold": {{Name: "gold", Limiter: newBucket(t, keylimit.PerMinute(100), mock)}}},
	})
	for _, tc := range []struct {
		tier, wantTier, wantPolicy string
		want                       quota.Action
	}{
		{"gold", "gold", "gold", quota.Proceed},
		{"gold", "gold", "gold", quota.Proceed},
		{"", "", "free", quota.Proceed},
		{"silver", "", "free", quota.Refuse},
	} {
		got, dec := decide(t, d, "k", tc.tier, 1)
		require.Equal(t, tc.want, got.action, "tier %q", tc.tier)
		require.Equal(t, tc.wantTier, dec.Tier, "tier %q", tc.tier)
		require.Equal(t, tc.wantPolicy, dec.Policy, "tier %q", tc.tier)
	}
}

// A request whose context has ended, or whose cost is negative, asks no
// limiter and gets no Verdict; one whose context ends while a limiter
// decides gets the context's error; any other error of a limiter is a
// failure policy's, and its Result is the decision.
func TestDecideErrors(t *testing.T) {
	lim := &takeless{}
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "p", Limiter: lim}}})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := d.Decide(ended, "k", "", 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = d.Decide(context.Background(), "k", "", -1)
	require.EqualError(t, err, "quota: a cost is at least 0")
	require.Zero(t, lim.calls, "no limiter was asked")

	ctx, cancel := context.WithCancel(context.Background())
	hangsUp := &contextLimiter{take: func(context.Context) (keylimit.Result, error) {
		cancel()
		return keylimit.Result{}, context.Canceled
	}}
	d = newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "p", Limiter: hangsUp}}})
	_, err = d.Decide(ctx, "k", "", 1)
	require.ErrorIs(t, err, context.Canceled)

	fallback := &contextLimiter{take: func(context.Context) (keylimit.Result, error) {
		return keylimit.Result{Allowed: true, Limit: 4, Remaining: 3}, errors.New("the store is down: admitted by the failure policy")
	}}
	d = newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "p", Limiter: fallback}}})
	v, err := d.Decide(context.Background(), "k", "", 1)
	require.NoError(t, err)
	require.Equal(t, quota.Proceed, v.Action())
	require.Equal(t, `"p";r=3;t=0`, v.RateLimit())
}

// Deciding an admitted request for a known key allocates one string, its
// RateLimit value, with one policy or several: RateLimit-Policy is reused
// while no quota or window changes, and the Results of several come from a
// pool. Finish allocates nothing. A refused request's one string holds
// Retry-After's value too.
func TestDecideAllocs(t *testing.T) {
	mock := clock.NewMock()
	plenty := func(name string) quota.Policy {
		return quota.Policy{Name: name, Limiter: newBucket(t, keylimit.PerSecond(1_000_000_000), mock)}
	}
	ctx := context.Background()
	for _, ps := range [][]quota.Policy{{plenty("second")}, {plenty("second"), plenty("hour")}} {
		d := newDecider(t, quota.Config{Policies: ps})
		_, err := d.Decide(ctx, "k", "", 1)
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(1000, func() {
			v, err := d.Decide(ctx, "k", "", 1)
			if err != nil || v.Action() != quota.Proceed {
				panic("refused")
			}
			v.Finish()
		})
		require.Equal(t, 1.0, allocs, "%d policies", len(ps))
	}
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "hour", Limiter: newBucket(t, keylimit.PerHour(1), mock)}}})
	decide(t, d, "k", "", 1)
	allocs := testing.AllocsPerRun(1000, func() {
		v, err := d.Decide(ctx, "k", "", 1)
		if err != nil || v.RetryAfter() != "3600" {
			panic("not refused for an hour")
		}
	})
	require.Equal(t, 1.0, allocs, "refused")
}

// On a frozen clock, many goroutines deciding on one key under two
// policies: exactly the narrower quota proceeds, and the wider one took
// exactly that many, no more: a refused request took nothing from it.
func TestDecideConcurrent(t *testing.T) {
	mock := clock.NewMock()
	wide := newBucket(t, keylimit.PerMinute(500), mock)
	narrow := newBucket(t, keylimit.PerMinute(300), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "wide", Limiter: wide}, {Name: "narrow", Limiter: narrow}}})
	var proceeded, refused atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 50 {
				v, err := d.Decide(context.Background(), "k", "", 1)
				switch {
				case err != nil:
				case v.Action() == quota.Proceed:
					proceeded.Add(1)
				case v.Action() == quota.Refuse:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(300), proceeded.Load())
	require.Equal(t, int64(64*50-300), refused.Load())
	require.Equal(t, 200, wide.Peek("k").Remaining)
}

// A Config that cannot work is an error that says why; errors.Unwrap says
// it without the package's name, and errors.Is sees keylimit's error behind
// a Bucket's.
func TestNewErrors(t *testing.T) {
	mock := clock.NewMock()
	p := func(name string) quota.Policy {
		return quota.Policy{Name: name, Limiter: newBucket(t, keylimit.PerMinute(1), mock)}
	}
	for _, tc := range []struct {
		c    quota.Config
		want string
	}{
		{quota.Config{}, "Config.Policies is empty: give at least one Policy"},
		{quota.Config{Policies: []quota.Policy{p("")}}, "a policy has no name"},
		{quota.Config{Policies: []quota.Policy{p("a\n")}}, `policy name "a\n" has a byte 0xa a Structured Field String cannot hold (printable ASCII only)`},
		{quota.Config{Policies: []quota.Policy{p("a"), p("a")}}, `two policies are named "a"`},
		{quota.Config{Policies: []quota.Policy{{Name: "a"}}}, `policy "a" has no Limiter`},
		{quota.Config{Policies: []quota.Policy{{Name: "a", Limiter: &takeless{}, Window: -s}}}, `policy "a": Window -1s is negative`},
		{quota.Config{Policies: []quota.Policy{{Name: "a", Limiter: &scripted{}}, p("b")}}, `policy "a": its limiter (*quota_test.scripted) cannot Refund, so it must be the last policy`},
		{quota.Config{Policies: []quota.Policy{quota.Bucket("a", keylimit.PerMinute(0))}}, `policy "a": keylimit: events 0 is below 1`},
		{quota.Config{Policies: []quota.Policy{p("a")}, Tiers: map[string][]quota.Policy{"": {p("b")}}}, `Config.Tiers has a tier named "": Config.Policies is that tier`},
		{quota.Config{Policies: []quota.Policy{p("a")}, Tiers: map[string][]quota.Policy{"gold": nil}}, `tier "gold" has no policies (tier "gold")`},
	} {
		d, err := quota.New(tc.c)
		require.Nil(t, d)
		require.EqualError(t, err, "quota: "+tc.want)
		require.EqualError(t, errors.Unwrap(err), tc.want)
	}
	_, err := quota.New(quota.Config{Policies: []quota.Policy{{Name: "a", Limiter: &noLimit{}}}})
	require.ErrorContains(t, err, `policy "a": set its Window: the limiter (*quota_test.noLimit) does not report its Limit`)
	_, err = quota.New(quota.Config{Policies: []quota.Policy{{Name: "a", Limiter: &noLimit{}, Window: s}}})
	require.NoError(t, err, "a limiter that reports no Limit, with its Window set")
}

// FieldsOnRefusal: an admitted Verdict has no field values, a refused one
// the values a Decider without it gives, on limiters in the same state.
func TestFieldsOnRefusal(t *testing.T) {
	mock := clock.NewMock()
	deciders := make([]*quota.Decider, 2)
	for i, fieldsOnRefusal := range []bool{false, true} {
		b, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		deciders[i], err = quota.New(quota.Config{Policies: []quota.Policy{{Name: "minute", Limiter: b}}, FieldsOnRefusal: fieldsOnRefusal})
		require.NoError(t, err)
	}
	for i := range 3 {
		full, err := deciders[0].Decide(context.Background(), "k", "", 1)
		require.NoError(t, err)
		got, err := deciders[1].Decide(context.Background(), "k", "", 1)
		require.NoError(t, err)
		require.Equal(t, full.Action(), got.Action(), "request %d", i)
		require.Equal(t, full.Decision, got.Decision, "request %d", i)
		if i < 2 {
			require.Equal(t, quota.Proceed, got.Action(), "request %d", i)
			require.NotEmpty(t, full.RateLimit(), "request %d without FieldsOnRefusal", i)
			require.Equal(t, [2]string{}, [2]string{got.RateLimit(), got.RateLimitPolicy()}, "request %d, admitted", i)
			require.NotEmpty(t, full.RateLimitPolicy(), "request %d without FieldsOnRefusal", i)
			continue
		}
		require.Equal(t, quota.Refuse, got.Action())
		require.Equal(t, [3]string{full.RateLimit(), full.RateLimitPolicy(), full.RetryAfter()},
			[3]string{got.RateLimit(), got.RateLimitPolicy(), got.RetryAfter()}, "refused")
		require.NotEmpty(t, got.RetryAfter())
	}
}
