package quota_test

import (
	"context"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// newConcurrency returns a Concurrency of n slots a key, closed when the
// test ends.
func newConcurrency(t testing.TB, n int, opts ...keylimit.Option) *keylimit.Concurrency[string] {
	t.Helper()
	c, err := keylimit.NewConcurrency[string](n, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// A concurrency policy alone: a request holds its slot from Decide to
// Finish; its fields have q and qu="concurrent-requests" and no w, r and
// no t; a request that finds no slot free is refused with Retry-After (the
// limiter's estimate: a second before any hold has ended) and holds
// nothing; a second Finish (of a copy) releases nothing.
func TestConcurrentPolicyHoldsUntilFinish(t *testing.T) {
	inflight := newConcurrency(t, 2)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "inflight", Concurrency: inflight}}})
	const policy = `"inflight";q=2;qu="concurrent-requests"`

	v1, err := d.Decide(context.Background(), "k", "", 1)
	require.NoError(t, err)
	require.Equal(t, quota.Proceed, v1.Action())
	require.Equal(t, `"inflight";r=1`, v1.RateLimit())
	require.Equal(t, policy, v1.RateLimitPolicy())
	v2, err := d.Decide(context.Background(), "k", "", 1)
	require.NoError(t, err)
	require.Equal(t, `"inflight";r=0`, v2.RateLimit())

	got, dec := decide(t, d, "k", "", 1)
	require.Equal(t, decided{quota.Refuse, "inflight", `"inflight";r=0`, policy, "1"}, got)
	require.Equal(t, 2, dec.Result.Limit)
	require.Equal(t, 0, inflight.Peek("k").Remaining, "the refusal holds nothing, the two hold both")

	other, _ := decide(t, d, "other", "", 1)
	require.Equal(t, quota.Proceed, other.action, "another key has its own slots")

	copied := v1
	v1.Finish()
	copied.Finish() // a copy of a finished Verdict: releases nothing more
	require.Equal(t, 1, inflight.Peek("k").Remaining)
	v2.Finish()
	require.Equal(t, 2, inflight.Peek("k").Remaining)
	var zero quota.Verdict
	zero.Finish()
}

// A concurrency policy and a rate policy in one tier, all or nothing, with
// exact counts both ways, on a frozen clock: a request refused for want of
// a slot takes nothing from "hour" (its Remaining counts the admitted
// only), and one that "hour" refuses holds no slot. Each policy is its
// member of the fields, in the tier's order. (The rate member's t is not
// this test's: it is read up to "t=".)
func TestConcurrentWithRatePolicyAllOrNothing(t *testing.T) {
	mock := clock.NewMock()
	inflight := newConcurrency(t, 2, keylimit.WithStats())
	hour := newBucket(t, keylimit.PerHour(5), mock)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "hour", Limiter: hour},
		{Name: "inflight", Concurrency: inflight},
	}})
	const policy = `"hour";q=5;w=3600, "inflight";q=2;qu="concurrent-requests"`
	a, b := mustDecide(t, d, "k"), mustDecide(t, d, "k")
	require.Equal(t, []quota.Action{quota.Proceed, quota.Proceed}, []quota.Action{a.Action(), b.Action()})
	require.Equal(t, policy, a.RateLimitPolicy())

	for i := range 10 {
		v := mustDecide(t, d, "k")
		require.Equal(t, quota.Refuse, v.Action(), "request %d", i)
		require.Equal(t, "inflight", v.Decision.Policy)
		require.Equal(t, []string{"inflight"}, v.AppendViolatedPolicies(nil))
		require.Regexp(t, `^"hour";r=3;t=\d+, "inflight";r=0$`, v.RateLimit())
		require.Equal(t, "1", v.RetryAfter(), "the estimate before any hold has ended: a second")
		v.Finish() // a refusal holds nothing: a no-op
	}
	require.Equal(t, 3, hour.Peek("k").Remaining, "10 refused for want of a slot took nothing from hour")
	require.Equal(t, 0, inflight.Peek("k").Remaining)

	a.Finish()
	b.Finish()
	for range 3 { // hour's last three
		v := mustDecide(t, d, "k")
		require.Equal(t, quota.Proceed, v.Action())
		v.Finish()
	}
	require.Equal(t, 0, hour.Peek("k").Remaining)
	for i := range 10 {
		v := mustDecide(t, d, "k")
		require.Equal(t, quota.Refuse, v.Action(), "request %d", i)
		require.Equal(t, "hour", v.Decision.Policy)
		require.Regexp(t, `^"hour";r=0;t=\d+, "inflight";r=2$`, v.RateLimit(), "the slot taken for it is back")
		require.Equal(t, 2, inflight.Peek("k").Remaining, "refused by hour, request %d holds no slot", i)
	}
	st := inflight.Stats()
	require.Equal(t, [2]uint64{15, 10}, [2]uint64{st.Admitted, st.Refused},
		"acquisitions: the 5 admitted and the 10 hour refused (given back); refusals: the 10 for want of a slot")
}

// The tier's shape is checked: at most one concurrency policy, and it has
// no Limiter and no Window; an invalid n is New's error.
func TestConcurrentPolicyConfigErrors(t *testing.T) {
	c := newConcurrency(t, 1)
	for _, tc := range []struct {
		policies []quota.Policy
		err      string
	}{
		{[]quota.Policy{{Name: "a", Concurrency: c}, {Name: "b", Concurrency: c}}, `quota: policies "a" and "b" are both concurrency policies: a tier holds at most one`},
		{[]quota.Policy{{Name: "a", Concurrency: c, Limiter: newBucket(t, keylimit.PerHour(1), clock.NewMock())}}, `quota: policy "a" has both a Limiter and a Concurrency: it is one or the other`},
		{[]quota.Policy{{Name: "a", Concurrency: c, Window: time.Minute}}, `quota: policy "a": a concurrency policy has no Window (it bounds requests at once, not over time)`},
		{[]quota.Policy{quota.Concurrent("a", 0)}, `quota: policy "a": keylimit:`},
	} {
		_, err := quota.New(quota.Config{Policies: tc.policies})
		require.ErrorContains(t, err, tc.err)
	}
}

// mustDecide decides a request of key in the default tier, costing 1.
func mustDecide(t *testing.T, d *quota.Decider, key string) quota.Verdict {
	t.Helper()
	v, err := d.Decide(context.Background(), key, "", 1)
	require.NoError(t, err)
	return v
}

// A concurrency policy costs a decision what a rate policy does: its
// RateLimit string, one allocation, alone or beside a rate policy; the
// Permit lives in the Verdict and the hold record is the key's own or
// pooled.
func TestConcurrentDecideAllocs(t *testing.T) {
	mock := clock.NewMock()
	for _, ps := range [][]quota.Policy{
		{{Name: "inflight", Concurrency: newConcurrency(t, 4)}},
		{{Name: "inflight", Concurrency: newConcurrency(t, 4)}, {Name: "second", Limiter: newBucket(t, keylimit.PerSecond(1_000_000_000), mock)}},
	} {
		d := newDecider(t, quota.Config{Policies: ps})
		warm := mustDecide(t, d, "k")
		warm.Finish()
		allocs := testing.AllocsPerRun(1000, func() {
			v, err := d.Decide(context.Background(), "k", "", 1)
			if err != nil || v.Action() != quota.Proceed {
				panic("refused")
			}
			v.Finish()
		})
		require.Equal(t, 1.0, allocs, "%d policies", len(ps))
	}
}
