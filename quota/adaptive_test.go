package quota_test

import (
	"context"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// newAdaptive returns an adaptive.Limiter of alg on a mock clock, closed when the
// test ends.
func newAdaptive(t testing.TB, alg adaptive.Algorithm) *adaptive.Limiter[string] {
	t.Helper()
	a, err := adaptive.New[string](alg, keylimit.WithClock(clock.NewMock()))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// An adaptive concurrency policy sheds: its refusal is marked
// Decision.Shed, with a Retry-After; a static one's is not. Its requests
// are asked at their context's criticality, and need their outcome.
func TestAdaptivePolicySheds(t *testing.T) {
	a := newAdaptive(t, adaptive.AIMD(8, 16)) // starts at its floor, 8: sheddable 6, critical 10
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "capacity", Concurrency: a}}})
	ctx := context.Background()
	sheddable := keylimit.WithCriticality(ctx, keylimit.Sheddable)
	var held []quota.Verdict
	for range 6 {
		v, err := d.Decide(sheddable, "k", "", 1)
		require.NoError(t, err)
		require.Equal(t, quota.Proceed, v.Action())
		require.True(t, v.NeedsOutcome(), "an adaptive slot learns from the outcome")
		held = append(held, v)
	}
	v, err := d.Decide(sheddable, "k", "", 1)
	require.NoError(t, err)
	require.Equal(t, quota.Refuse, v.Action())
	require.True(t, v.Decision.Shed)
	require.False(t, v.NeedsOutcome())
	require.NotEmpty(t, v.RetryAfter())
	require.Equal(t, "capacity", v.Decision.Policy)

	for range 2 { // default requests still pass, to the limit
		v, err := d.Decide(ctx, "k", "", 1)
		require.NoError(t, err)
		require.Equal(t, quota.Proceed, v.Action())
		held = append(held, v)
	}
	v, _ = d.Decide(ctx, "k", "", 1)
	require.True(t, v.Decision.Shed)
	v, _ = d.Decide(keylimit.WithCriticality(ctx, keylimit.Critical), "k", "", 1)
	require.Equal(t, quota.Proceed, v.Action(), "critical requests have a reserve")
	held = append(held, v)
	require.Equal(t, [3]uint64{1, 0, 1}, a.Stats().Shed)
	for i := range held {
		held[i].FinishWith(quota.Outcome{Status: 200})
	}
	require.Equal(t, 8, a.Peek("k").Remaining)

	static := newConcurrency(t, 1)
	d2 := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "inflight", Concurrency: static}}})
	v1, _ := d2.Decide(ctx, "k", "", 1)
	defer v1.Finish()
	require.False(t, v1.NeedsOutcome())
	v2, _ := d2.Decide(ctx, "k", "", 1)
	require.Equal(t, quota.Refuse, v2.Action())
	require.False(t, v2.Decision.Shed, "a static concurrency policy refuses, it does not shed")
}

// FinishWith gives an adaptive slot back with Drop when the outcome is
// overload (so a window of them ends slow start and cuts the limit, which
// stays at its floor, 1) and with Release otherwise (a busy window in slow
// start doubles it).
func TestAdaptivePolicyLearnsFromOutcome(t *testing.T) {
	for _, c := range []struct {
		name string
		o    quota.Outcome
		want int
	}{
		{"ok", quota.Outcome{Status: 200}, 2},
		{"client error", quota.Outcome{Status: 404}, 2},
		{"grpc ok", quota.Outcome{Status: 0}, 2},
		{"503", quota.Outcome{Status: 503}, 1},
		{"504", quota.Outcome{Status: 504}, 1},
		{"panic", quota.Outcome{Status: 500, Panicked: true}, 1},
		{"deadline", quota.Outcome{Status: 200, Expired: true}, 1},
		{"grpc unavailable", quota.Outcome{Status: 14}, 1},
		{"grpc deadline", quota.Outcome{Status: 4}, 1},
		{"grpc resource exhausted", quota.Outcome{Status: 8}, 1},
	} {
		a := newAdaptive(t, adaptive.AIMD(1, 10)) // starts at 1, in slow start
		d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "capacity", Concurrency: a}}})
		for range 16 { // one window
			v, err := d.Decide(context.Background(), "k", "", 1)
			require.NoError(t, err)
			require.Equal(t, quota.Proceed, v.Action())
			v.FinishWith(c.o)
			v.FinishWith(quota.Outcome{Status: 503}) // a second end gives back nothing
		}
		require.Equal(t, c.want, a.Stats().Limit, c.name)
		require.Equal(t, c.want, a.Peek("k").Remaining, c.name+": the key learnt the same, and holds nothing")
	}
}
