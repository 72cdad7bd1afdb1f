package quota_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// chargeStatus is a Policy.Charge that charges the outcomes of status
// only, whole.
func chargeStatus(status int) func(quota.Outcome) int {
	return func(o quota.Outcome) int {
		if o.Status == status {
			return o.Cost
		}
		return 0
	}
}

// Failures only, step by step on a frozen clock: every login is admitted
// with its cost (r counts it), a success (200) is given back when it
// ends, a failure (401) kept; the sixth failure's attempt is refused, and
// so is a login with the right password then, until the window moves on.
// Finish (an unknown outcome) keeps the whole cost; a second FinishWith
// gives nothing more back.
func TestChargeByOutcomeSteps(t *testing.T) {
	mock := clock.NewMock()
	failures, err := keylimit.NewSlidingWindow[string](keylimit.Per(5, 15*time.Minute), keylimit.WithClock(mock))
	require.NoError(t, err)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "failures", Limiter: failures, Charge: chargeStatus(401)}}})

	login := func(status int) quota.Verdict {
		t.Helper()
		v := mustDecide(t, d, "alice")
		if v.Action() == quota.Proceed {
			require.True(t, v.NeedsOutcome())
			v.FinishWith(quota.Outcome{Status: status, Reported: -1})
		}
		return v
	}
	for i, step := range []struct {
		status    int // the login's outcome, if it proceeds
		action    quota.Action
		rateLimit string // of the decision, before the outcome
		remaining int    // after the outcome
	}{
		{200, quota.Proceed, `"failures";r=4;t=900`, 5},
		{401, quota.Proceed, `"failures";r=4;t=900`, 4},
		{200, quota.Proceed, `"failures";r=3;t=900`, 4},
		{401, quota.Proceed, `"failures";r=3;t=900`, 3},
		{401, quota.Proceed, `"failures";r=2;t=900`, 2},
		{401, quota.Proceed, `"failures";r=1;t=900`, 1},
		{401, quota.Proceed, `"failures";r=0;t=900`, 0},
		{200, quota.Refuse, `"failures";r=0;t=900`, 0}, // locked: the right password too
	} {
		v := login(step.status)
		require.Equal(t, step.action, v.Action(), "step %d", i)
		require.Equal(t, step.rateLimit, v.RateLimit(), "step %d", i)
		require.Equal(t, step.remaining, failures.Peek("alice").Remaining, "step %d", i)
	}
	mock.Add(15 * time.Minute)
	v := mustDecide(t, d, "alice")
	require.Equal(t, quota.Proceed, v.Action(), "the failures have left the window")
	v.Finish() // outcome unknown: charged
	v.FinishWith(quota.Outcome{Status: 200, Reported: -1})
	require.Equal(t, 4, failures.Peek("alice").Remaining, "Finish kept the cost; the FinishWith after it gave nothing back")
}

// A cost the handler reports while it runs (ReportCost, through the
// Verdict's Context): admitted with the most a request may cost (10), it
// is charged what it reported and the rest is given back, exactly, on a
// bucket and a fixed window alike; a request that reports nothing is
// charged the whole cost (ChargeReported). ReportCost outside such a
// request does nothing.
func TestChargeReportedCost(t *testing.T) {
	mock := clock.NewMock()
	bucket := newBucket(t, keylimit.PerHour(100), mock)
	window, err := keylimit.NewFixedWindow[string](keylimit.PerHour(100), keylimit.WithClock(mock))
	require.NoError(t, err)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "bucket", Limiter: bucket, Charge: quota.ChargeReported},
		{Name: "window", Limiter: window, Charge: quota.ChargeReported},
	}})
	require.False(t, quota.ReportCost(context.Background(), 3))
	for _, reported := range []int{3, -1, 0, 7, 10, 12} {
		v, err := d.Decide(context.Background(), "k", "", 10)
		require.NoError(t, err)
		require.Equal(t, quota.Proceed, v.Action())
		if reported >= 0 {
			require.True(t, quota.ReportCost(v.Context(context.Background()), reported))
		}
		v.FinishWith(quota.Outcome{Reported: -1})
	}
	// 3 + 10 + 0 + 7 + 10 + 10 (12 is clamped to the cost admitted)
	require.Equal(t, 100-40, bucket.Peek("k").Remaining)
	require.Equal(t, 100-40, window.Peek("k").Remaining)
}

// Many concurrent requests with random costs and random outcomes, on a
// sliding window of 50 a minute and a mock clock that moves between
// rounds: the charged events in any interval of a minute never exceed
// 50, and every free event is given back, exactly: after each round the
// window's Remaining is 50 less the events charged in the last minute,
// counted by the test.
func TestChargeByOutcomeConcurrent(t *testing.T) {
	mock := clock.NewMock()
	lim, err := keylimit.NewSlidingWindow[string](keylimit.PerMinute(50), keylimit.WithClock(mock))
	require.NoError(t, err)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "minute", Limiter: lim, Charge: quota.ChargeReported}}})
	checkChargedConcurrently(t, d, mock, func() int { return lim.Peek("k").Remaining }, 50, time.Minute, 1)
}

// checkChargedConcurrently runs rounds of concurrent requests of key "k"
// on d (one policy of quota quota over period, charged by ChargeReported)
// with random costs and reports, moving mock by multiples of 7 s (0 to 63) between
// rounds (never exactly period), and checks that the events charged in any
// interval of period are at most quota and that remaining, after each
// round, is quota less those charged in the last period.
func checkChargedConcurrently(t *testing.T, d *quota.Decider, mock *clock.Mock, remaining func() int, quotaN int, period time.Duration, seed uint64) {
	t.Helper()
	const rounds, goroutines, attempts = 24, 64, 12
	type round struct {
		at      time.Time
		charged int64
	}
	var history []round
	var admitted, refused, freed atomic.Int64
	rng := rand.New(rand.NewPCG(seed, 0))
	for range rounds {
		var charged atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			r := rand.New(rand.NewPCG(seed, rng.Uint64()+uint64(g)))
			wg.Go(func() {
				for range attempts {
					cost := 1 + r.IntN(3)
					v, err := d.Decide(context.Background(), "k", "", cost)
					if err != nil || v.Action() != quota.Proceed {
						refused.Add(1)
						continue
					}
					admitted.Add(1)
					reported := r.IntN(cost+2) - 1 // -1 (none: all charged) to cost
					if reported >= 0 {
						quota.ReportCost(v.Context(context.Background()), reported)
					}
					v.FinishWith(quota.Outcome{Reported: -1})
					c := quota.ChargeReported(quota.Outcome{Cost: cost, Reported: reported})
					charged.Add(int64(c))
					freed.Add(int64(cost - c))
				}
			})
		}
		wg.Wait()
		now := mock.Now()
		history = append(history, round{now, charged.Load()})
		var inWindow int64
		for _, h := range history {
			if now.Sub(h.at) < period {
				inWindow += h.charged
			}
		}
		require.LessOrEqual(t, inWindow, int64(quotaN), "charged in the last period")
		require.Equal(t, quotaN-int(inWindow), remaining(), "round %d: every free event given back", len(history)-1)
		mock.Add(time.Duration(rng.IntN(10)) * 7 * time.Second)
	}
	for i := range history { // any interval of period: every run of rounds within one
		var sum int64
		for j := i; j < len(history) && history[j].at.Sub(history[i].at) < period; j++ {
			sum += history[j].charged
		}
		require.LessOrEqual(t, sum, int64(quotaN), "charged in the period from round %d", i)
	}
	var total int64
	for _, h := range history {
		total += h.charged
	}
	require.Positive(t, freed.Load(), "some events were free")
	require.Positive(t, refused.Load(), "the quota was reached")
	t.Logf("%d admitted, %d refused; %d events charged, %d given back", admitted.Load(), refused.Load(), total, freed.Load())
}
