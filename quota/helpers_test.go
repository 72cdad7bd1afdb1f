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

// The helpers of the package's tests.

const s = time.Second

// newBucket returns a TokenBucket of l read on mock, closed when the test
// ends.
func newBucket(t testing.TB, l keylimit.Limit, mock *clock.Mock, opts ...keylimit.Option) *keylimit.TokenBucket[string] {
	t.Helper()
	b, err := keylimit.NewTokenBucket[string](l, append(opts, keylimit.WithClock(mock))...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// newDecider returns the Decider of c, failing the test on an error.
func newDecider(t testing.TB, c quota.Config) *quota.Decider {
	t.Helper()
	d, err := quota.New(c)
	require.NoError(t, err)
	return d
}

// decided is what a test reads of a Verdict.
type decided struct {
	action          quota.Action
	policy          string
	rateLimit       string
	rateLimitPolicy string
	retryAfter      string
}

// decide decides a request of key in tier, costing cost, under a context
// that does not end, and returns what a test reads of it and its Decision.
func decide(t *testing.T, d *quota.Decider, key, tier string, cost int) (decided, quota.Decision) {
	t.Helper()
	v, err := d.Decide(context.Background(), key, tier, cost)
	require.NoError(t, err)
	return decided{v.Action(), v.Decision.Policy, v.RateLimit(), v.RateLimitPolicy(), v.RetryAfter()}, v.Decision
}

// takeless is a Limiter that counts the calls made to it and admits every
// one, with a Limit to report: a limiter that would notice if it were
// asked.
type takeless struct{ calls int }

func (l *takeless) Take(string, int) keylimit.Result {
	l.calls++
	return keylimit.Result{Allowed: true, Limit: 1, Remaining: 1}
}
func (l *takeless) Peek(string) keylimit.Result { return keylimit.Result{Limit: 1, Remaining: 1} }
func (l *takeless) Allow(k string) bool         { return l.Take(k, 1).Allowed }
func (l *takeless) AllowN(k string, n int) bool { return l.Take(k, n).Allowed }
func (l *takeless) Reset(string)                {}
func (l *takeless) Limit() keylimit.Limit       { return keylimit.PerSecond(1) }

// scripted is a Limiter that answers every Take and Peek with result, and
// reports a Limit; it cannot Refund.
type scripted struct{ result keylimit.Result }

func (l *scripted) Take(string, int) keylimit.Result { return l.result }
func (l *scripted) Peek(string) keylimit.Result      { return l.result }
func (l *scripted) Allow(k string) bool              { return l.result.Allowed }
func (l *scripted) AllowN(k string, n int) bool      { return l.result.Allowed }
func (l *scripted) Reset(string)                     {}
func (l *scripted) Limit() keylimit.Limit            { return keylimit.PerMinute(max(l.result.Limit, 1)) }

// contextLimiter is a ContextLimiter whose TakeContext answers as take
// says.
type contextLimiter struct {
	scripted
	take func(ctx context.Context) (keylimit.Result, error)
}

func (l *contextLimiter) TakeContext(ctx context.Context, _ string, _ int) (keylimit.Result, error) {
	return l.take(ctx)
}

// noLimit is a Limiter that reports no Limit: a policy on it needs its
// Window set.
type noLimit struct{ scripted }

func (*noLimit) Limit() {}

// chargeReported is a Policy.Charge that charges the cost the handler
// reported, or the whole cost if it reported none.
func chargeReported(o quota.Outcome) int {
	if o.Reported < 0 {
		return o.Cost
	}
	return o.Reported
}
