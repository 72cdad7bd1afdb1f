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
// charged the whole cost (chargeReported). ReportCost outside such a
// request does nothing.
func TestChargeReportedCost(t *testing.T) {
	mock := clock.NewMock()
	bucket := newBucket(t, keylimit.PerHour(100), mock)
	window, err := keylimit.NewFixedWindow[string](keylimit.PerHour(100), keylimit.WithClock(mock))
	require.NoError(t, err)
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "bucket", Limiter: bucket, Charge: chargeReported},
		{Name: "window", Limiter: window, Charge: chargeReported},
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
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "minute", Limiter: lim, Charge: chargeReported}}})
	checkChargedConcurrently(t, d, mock, func() int { return lim.Peek("k").Remaining }, 50, time.Minute, 1)
}

// checkChargedConcurrently runs rounds of concurrent requests of key "k"
// on d (one policy of quota quota over period, charged by chargeReported)
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
					c := chargeReported(quota.Outcome{Cost: cost, Reported: reported})
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

// Issue 37.6, step by step on a frozen clock, 2 failures per 15 minutes on
// a fixed window: with 2 logins in flight a third is refused InFlight,
// with Retry-After 1 and t=1, not the window's 900; so it stays while one
// of them is in flight, even once the other has failed; once both have
// failed it is refused for the window's 900 seconds, not InFlight. With
// costs of 2 of a quota of 5, what is in flight counts whole: a request
// is InFlight if what remains and what is held would fit it.
func TestChargeByOutcomeInFlight(t *testing.T) {
	mock := clock.NewMock()
	window := func(events int) *keylimit.FixedWindow[string] {
		w, err := keylimit.NewFixedWindow[string](keylimit.Per(events, 15*time.Minute), keylimit.WithClock(mock))
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		return w
	}
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "failures", Limiter: window(2), Charge: chargeStatus(401)}}})
	// refused checks the next decision of cost for key: refused, InFlight
	// or not, with its Retry-After and RateLimit.
	refused := func(d *quota.Decider, key string, cost int, inFlight bool, retryAfter, rateLimit string) {
		t.Helper()
		got, dec := decide(t, d, key, "", cost)
		require.Equal(t, quota.Refuse, got.action)
		require.Equal(t, inFlight, dec.InFlight, "InFlight")
		require.Equal(t, retryAfter, got.retryAfter, "Retry-After")
		require.Equal(t, rateLimit, got.rateLimit)
	}
	a, b := mustDecide(t, d, "alice"), mustDecide(t, d, "alice")
	refused(d, "alice", 1, true, "1", `"failures";r=0;t=1`)
	a.FinishWith(quota.Outcome{Status: 401, Reported: -1})
	refused(d, "alice", 1, true, "1", `"failures";r=0;t=1`)
	b.FinishWith(quota.Outcome{Status: 401, Reported: -1})
	b.Finish() // a second end leaves nothing more
	refused(d, "alice", 1, false, "900", `"failures";r=0;t=900`)

	d = newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "failures", Limiter: window(5), Charge: chargeStatus(401)}}})
	two := func() quota.Verdict {
		t.Helper()
		v, err := d.Decide(context.Background(), "bob", "", 2)
		require.NoError(t, err)
		require.Equal(t, quota.Proceed, v.Action())
		return v
	}
	a, b = two(), two()
	refused(d, "bob", 2, true, "1", `"failures";r=1;t=1`)
	a.FinishWith(quota.Outcome{Status: 401, Reported: -1})
	refused(d, "bob", 2, true, "1", `"failures";r=1;t=1`)
	b.Finish() // unknown: kept whole
	refused(d, "bob", 2, false, "900", `"failures";r=1;t=900`)
	refused(d, "bob", 6, false, "", `"failures";r=1;t=900`) // never: above the quota
}

// A refusal is InFlight only if every policy short of the cost is short
// only for what requests in flight hold: a tier that also lacks its hourly
// quota answers with the hour's Retry-After, and one whose concurrency
// policy refuses with that policy's, but the charged policy's t is the
// second its holds may take.
func TestChargeByOutcomeInFlightOnlyIfAll(t *testing.T) {
	mock := clock.NewMock()
	failures, err := keylimit.NewFixedWindow[string](keylimit.Per(1, 15*time.Minute), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { failures.Close() })
	hour, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { hour.Close() })
	d := newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "failures", Limiter: failures, Charge: chargeStatus(401)},
		{Name: "hour", Limiter: hour},
	}})
	v := mustDecide(t, d, "alice")
	got, dec := decide(t, d, "alice", "", 1)
	require.Equal(t, quota.Refuse, got.action)
	require.False(t, dec.InFlight, "the hour is spent too")
	require.Equal(t, "3600", got.retryAfter)
	require.Equal(t, `"failures";r=0;t=1, "hour";r=0;t=3600`, got.rateLimit)
	v.FinishWith(quota.Outcome{Status: 200, Reported: -1})

	inflight := newConcurrency(t, 1)
	d = newDecider(t, quota.Config{Policies: []quota.Policy{
		{Name: "inflight", Concurrency: inflight},
		{Name: "failures", Limiter: failures, Charge: chargeStatus(401)},
	}})
	v = mustDecide(t, d, "bob")
	got, dec = decide(t, d, "bob", "", 1)
	require.Equal(t, quota.Refuse, got.action)
	require.Equal(t, "inflight", dec.Policy)
	require.False(t, dec.InFlight, "a concurrency policy refused")
	require.Equal(t, "1", got.retryAfter, "the concurrency policy's estimate, not the window's 900")
	require.Equal(t, `"inflight";r=0, "failures";r=0;t=1`, got.rateLimit)
	v.FinishWith(quota.Outcome{Status: 200, Reported: -1})
}

// Failures stay exactly bounded with many requests at once: 64
// goroutines make 20 logins each of one key, under 5 failures per 15
// minutes on a frozen clock, 3 in 4 of them failing, in three windows:
// exactly 5 are charged in each, and once none is in flight a refusal
// says the window's end, not InFlight.
func TestChargeByOutcomeInFlightExact(t *testing.T) {
	mock := clock.NewMock()
	failures, err := keylimit.NewFixedWindow[string](keylimit.Per(5, 15*time.Minute), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { failures.Close() })
	d := newDecider(t, quota.Config{Policies: []quota.Policy{{Name: "failures", Limiter: failures, Charge: chargeStatus(401)}}})
	for window := range 3 {
		var failed, inFlight atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			r := rand.New(rand.NewPCG(37, uint64(g)))
			wg.Go(func() {
				for range 20 {
					v, err := d.Decide(context.Background(), "alice", "", 1)
					if err != nil {
						panic(err)
					}
					if v.Action() != quota.Proceed {
						if v.Decision.InFlight {
							inFlight.Add(1)
						}
						continue
					}
					status := 200
					if r.IntN(4) > 0 {
						status = 401
						failed.Add(1)
					}
					v.FinishWith(quota.Outcome{Status: status, Reported: -1})
				}
			})
		}
		wg.Wait()
		require.Equal(t, int64(5), failed.Load(), "window %d: failures admitted", window)
		require.Equal(t, 0, failures.Peek("alice").Remaining)
		got, dec := decide(t, d, "alice", "", 1)
		require.False(t, dec.InFlight, "window %d: none in flight", window)
		require.Equal(t, "900", got.retryAfter)
		t.Logf("window %d: 5 failures, %d refusals in flight", window, inFlight.Load())
		mock.Add(15 * time.Minute)
	}
}
