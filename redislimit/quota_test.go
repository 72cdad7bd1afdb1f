package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// A policy charged by outcome on the Redis limiters (issue 28.1): 32
// goroutines make 20 requests each of one key, of random costs 1 to 3,
// each reporting a random cost of its own or none (then charged whole):
// what is charged stays within the quota of 50, and every event the
// outcomes did not charge comes back by the partial refund, exactly: the
// key's Remaining is 50 less what was charged. The periods are long (an
// hour's log, a day's window) so that a run of seconds on Redis time is in
// one of them.
func TestChargeByOutcomeOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  newFunc
		l    keylimit.Limit
	}{
		{"SlidingWindow", types[2].new, keylimit.Per(50, time.Hour)},
		{"FixedWindow", types[1].new, keylimit.Per(50, 24*time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// patient: a slow round trip under -race must not be a
			// failure-policy decision, which counts nothing on Redis. No
			// deny cache: a refusal it caches as a refund gives back
			// answers the final Peek from the cache, until it expires.
			lim, err := tc.new(shared.client(t), tc.l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			require.NoError(t, err)
			d, err := kquota.New(kquota.Config{Policies: []kquota.Policy{{Name: "charged", Limiter: lim, Charge: chargeReported}}})
			require.NoError(t, err)
			key := testKey(t, "charged")
			var charged, freed, admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				r := rand.New(rand.NewPCG(28, uint64(g)))
				wg.Go(func() {
					for range 20 {
						ctx, cancel := context.WithTimeout(context.Background(), patient)
						cost := 1 + r.IntN(3)
						v, err := d.Decide(ctx, key, "", cost)
						if err == nil && v.Action() == kquota.Proceed {
							admitted.Add(1)
							reported := r.IntN(cost+2) - 1
							if reported >= 0 {
								kquota.ReportCost(v.Context(ctx), reported)
							}
							v.FinishWith(kquota.Outcome{Reported: -1})
							c := chargeReported(kquota.Outcome{Cost: cost, Reported: reported})
							charged.Add(int64(c))
							freed.Add(int64(cost - c))
						}
						cancel()
					}
				})
			}
			wg.Wait()
			require.LessOrEqual(t, charged.Load(), int64(50))
			require.Positive(t, freed.Load())
			require.Equal(t, 50-int(charged.Load()), lim.Peek(key).Remaining, "every free event given back")
			t.Logf("%d admitted; %d events charged, %d given back", admitted.Load(), charged.Load(), freed.Load())
		})
	}
}

// A quota concurrency policy on the Redis Concurrency (issue 27): 20
// requests of one key decided at once against 3 slots, the admitted ones
// holding theirs until all are decided: exactly 3 proceed, 17 are refused,
// and once the 3 finish every slot is free again.
func TestConcurrencyPolicyOnRedis(t *testing.T) {
	lim, err := redislimit.NewConcurrency(shared.client(t), "policy", 3, redislimit.WithTimeout(patient))
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	d, err := kquota.New(kquota.Config{Policies: []kquota.Policy{{Name: "inflight", Concurrency: lim}}})
	require.NoError(t, err)
	key := testKey(t, "inflight")
	var wg sync.WaitGroup
	var admitted, refused atomic.Int32
	decided := make(chan kquota.Verdict, 20)
	for range 20 {
		wg.Go(func() {
			v, err := d.Decide(context.Background(), key, "", 1)
			if err != nil || v.Action() != kquota.Proceed {
				refused.Add(1)
				return
			}
			admitted.Add(1)
			decided <- v
		})
	}
	wg.Wait()
	require.Equal(t, [2]int32{3, 17}, [2]int32{admitted.Load(), refused.Load()})
	require.Equal(t, 0, lim.Peek(key).Remaining)
	close(decided)
	for v := range decided {
		v.Finish()
	}
	require.Equal(t, 3, lim.Peek(key).Remaining, "every slot released")
}

// Issue 37.6 on the Redis limiters, with their deny cache as it comes: 5
// failures per window, successes free. 50 logins of one key at once, the
// 5 admitted held until the 45 others are refused: each refusal is
// InFlight, with a RetryAfter of a second at most, not the window's end.
// Then rounds of 50 at once, each ending as it will: every refusal is
// InFlight, and once they have ended the quota is whole, and a login
// passes (a refusal the deny cache kept from a race with a refund would
// refuse it till the window's end). Then 64 wrong passwords at once:
// exactly 5 are charged, and a refusal says the window's end.
func TestChargeByOutcomeInFlightOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  newFunc
		l    keylimit.Limit
	}{
		{"SlidingWindow", types[2].new, keylimit.Per(5, time.Hour)},
		{"FixedWindow", types[1].new, keylimit.Per(5, 24*time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, err := tc.new(shared.client(t), tc.l, redislimit.WithTimeout(patient))
			require.NoError(t, err)
			d, err := kquota.New(kquota.Config{Policies: []kquota.Policy{{Name: "failures", Limiter: lim, Charge: func(o kquota.Outcome) int {
				if o.Status == 401 {
					return o.Cost
				}
				return 0
			}}}})
			require.NoError(t, err)
			key := testKey(t, "alice")
			// logins decides n logins of key at once, each ending with
			// status, once the n-5 refused are decided if held; it returns
			// the refusals' Decisions.
			logins := func(n, status int, held bool) []kquota.Decision {
				t.Helper()
				var mu sync.Mutex
				var refusals []kquota.Decision
				var wg, decided sync.WaitGroup
				release := make(chan struct{})
				decided.Add(n)
				for range n {
					wg.Go(func() {
						v, err := d.Decide(context.Background(), key, "", 1)
						decided.Done()
						if err != nil {
							panic(err)
						}
						if v.Action() != kquota.Proceed {
							mu.Lock()
							refusals = append(refusals, v.Decision)
							mu.Unlock()
							return
						}
						if held {
							<-release
						}
						v.FinishWith(kquota.Outcome{Status: status, Reported: -1})
					})
				}
				if held {
					decided.Wait()
				}
				close(release)
				wg.Wait()
				return refusals
			}
			inFlight := func(what string, refusals []kquota.Decision) {
				t.Helper()
				for _, dec := range refusals {
					require.True(t, dec.InFlight, "%s: %v", what, dec.Result)
					require.LessOrEqual(t, dec.Result.RetryAfter, time.Second, what)
				}
			}
			refusals := logins(50, 200, true)
			require.Len(t, refusals, 45, "held right logins")
			inFlight("held right logins", refusals)
			require.Equal(t, 5, lim.Peek(key).Remaining, "successes are free")
			for round := range 5 {
				refusals = logins(50, 200, false)
				inFlight("right logins", refusals)
				v, err := d.Decide(context.Background(), key, "", 1)
				require.NoError(t, err)
				require.Equal(t, kquota.Proceed, v.Action(), "round %d, once all ended: %v", round, v.Decision.Result)
				v.FinishWith(kquota.Outcome{Status: 200, Reported: -1})
				t.Logf("round %d: %d of 50 right logins refused in flight", round, len(refusals))
			}
			refusals = logins(64, 401, true)
			require.Len(t, refusals, 59, "wrong passwords")
			inFlight("held wrong passwords", refusals)
			v, err := d.Decide(context.Background(), key, "", 1)
			require.NoError(t, err)
			require.Equal(t, kquota.Refuse, v.Action())
			require.False(t, v.Decision.InFlight, "5 failures charged, none in flight")
			require.Greater(t, v.Decision.Result.RetryAfter, time.Minute, "the window's end")
		})
	}
}

// A quota.Decider of an in-memory policy of 1 a second and a Redis one of
// 500 an hour, in either order (issue 38): of 100 requests of one key, 99
// refused in memory, Redis runs one script, for the one admitted (it was
// 100: a Peek per refusal, for the Redis policy's fields). A refusal's
// fields leave the Redis policy out.
func TestQuotaRefusedInMemoryMakesNoRoundTrip(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	for _, redisFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("redisFirst=%v", redisFirst), func(t *testing.T) {
			memory, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1), keylimit.WithClock(newMock()))
			require.NoError(t, err)
			t.Cleanup(func() { memory.Close() })
			ps := []kquota.Policy{{Name: "second", Limiter: memory}, {Name: "hour", Limiter: warmBucket(t, c, keylimit.PerHour(500))}}
			if redisFirst {
				ps[0], ps[1] = ps[1], ps[0]
			}
			d, err := kquota.New(kquota.Config{Policies: ps})
			require.NoError(t, err)
			key := testKey(t, "k")
			before := s.commandStats(t)
			admitted := 0
			var last kquota.Verdict
			for range 100 {
				v, err := d.Decide(context.Background(), key, "", 1)
				require.NoError(t, err)
				if v.Action() == kquota.Proceed {
					admitted++
				}
				last = v
			}
			require.Equal(t, 1, admitted, "admitted of 100")
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "Redis's commands for 100 requests")
			require.Equal(t, `"second";r=0;t=1`, last.RateLimit(), "a refusal's RateLimit: without the Redis policy")
			require.Equal(t, `"second";q=1;w=1`, last.RateLimitPolicy(), "a refusal's RateLimit-Policy")
		})
	}
}
