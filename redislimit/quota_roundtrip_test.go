package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Issue 38: a request a policy in process refuses makes no round trip to
// Redis, whatever the kind of the Redis policy beside it (a rate, a
// Concurrency, a rate charged by outcome) and the order of the two.

// roundTrips is a go-redis hook that counts the round trips of its
// client: each command processed, each pipeline once.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// The kinds of a remote policy.
var remoteKinds = []string{"rate", "concurrency", "charged"}

// remotePolicy returns a Policy named "redis" of kind on a Redis limiter of
// c, its script loaded, and its Remaining for a key (a round trip): a
// TokenBucket of 500 a day; a Concurrency of 500 slots, whose holds are
// renewed no sooner than every half hour; the TokenBucket charged by
// outcome, the whole cost.
func remotePolicy(t *testing.T, c redis.UniversalClient, kind string) (kquota.Policy, func(key string) int) {
	t.Helper()
	if kind == "concurrency" {
		lim, err := redislimit.NewConcurrency(c, "api", 500, redislimit.WithPrefix(testKey(t, "slots")+":"),
			redislimit.WithTimeout(patient), redislimit.WithHoldExpiry(time.Hour))
		require.NoError(t, err)
		t.Cleanup(func() { lim.Close() })
		if err := lim.Ping(context.Background()); !errors.Is(err, redislimit.ErrNoPersistence) || errors.Is(err, redislimit.ErrEvictionPolicy) {
			require.NoError(t, err, "Ping")
		}
		p, r := lim.TryAcquire(testKey(t, "warm"), 1)
		require.True(t, r.Allowed, "a warm-up acquisition")
		p.Release()
		return kquota.Policy{Name: "redis", Concurrency: lim}, func(key string) int { return lim.Peek(key).Remaining }
	}
	lim := warmBucket(t, c, keylimit.Per(500, 24*time.Hour))
	p := kquota.Policy{Name: "redis", Limiter: lim}
	if kind == "charged" {
		p.Charge = chargeReported
	}
	return p, func(key string) int { return lim.Peek(key).Remaining }
}

// inMemoryFirst returns an in-memory policy of 1 an hour, on a frozen
// clock, and remote, in that order, or the other if redisFirst.
func inMemoryFirst(t *testing.T, remote kquota.Policy, redisFirst bool) []kquota.Policy {
	t.Helper()
	memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(newMock()))
	require.NoError(t, err)
	t.Cleanup(func() { memory.Close() })
	if redisFirst {
		return []kquota.Policy{remote, {Name: "memory", Limiter: memory}}
	}
	return []kquota.Policy{{Name: "memory", Limiter: memory}, remote}
}

// TestQuotaRefusedInProcessMakesNoRoundTripOfAnyKind: a quota.Decider of
// an in-memory policy of 1 an hour and a Redis one of each kind, in either
// order: of 100 requests of one key, the in-memory policy refuses 99, and
// the client makes one round trip to Redis (one EVALSHA), for the one
// admitted. Before, a Concurrency or a charged policy was asked first, and
// gave back after each refusal: 199 round trips. The admitted request is
// counted once by the Redis policy, which has 499 left while it is in
// flight; once it ends, a slot's release is the one round trip more, and
// the charged policy keeps its charge: a refused request holds nothing on
// Redis.
func TestQuotaRefusedInProcessMakesNoRoundTripOfAnyKind(t *testing.T) {
	s := newServer(t)
	for _, kind := range remoteKinds {
		for _, redisFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/redisFirst=%v", kind, redisFirst), func(t *testing.T) {
				c := s.client(t)
				remote, remaining := remotePolicy(t, c, kind)
				var trips roundTrips
				c.AddHook(&trips)
				d, err := kquota.New(kquota.Config{Policies: inMemoryFirst(t, remote, redisFirst)})
				require.NoError(t, err)
				key := testKey(t, "k")
				before := s.commandStats(t)
				var admitted []kquota.Verdict
				for range 100 {
					v, err := d.Decide(context.Background(), key, "", 1)
					require.NoError(t, err)
					if v.Action() == kquota.Proceed {
						admitted = append(admitted, v)
					}
				}
				require.Len(t, admitted, 1, "admitted of 100")
				require.Equal(t, int64(1), trips.n.Load(), "round trips for 100 requests")
				require.Equal(t, int64(1), s.sentSince(t, before)["evalsha"], "Redis's EVALSHAs for 100 requests")
				admitted[0].FinishWith(kquota.Outcome{Status: http.StatusOK, Reported: -1})
				wantTrips, wantRemaining := int64(1), 499
				if kind == "concurrency" {
					wantTrips, wantRemaining = 2, 500
				}
				require.Equal(t, wantTrips, trips.n.Load(), "round trips once the admitted request ended")
				require.Equal(t, wantRemaining, remaining(key), "the Redis policy's Remaining once it ended")
			})
		}
	}
}

// TestHTTPRefusedInProcessMakesNoRoundTripOfAnyKind: through an httplimit
// middleware, an in-memory policy of 1 an hour beside a Redis Concurrency
// or a Redis policy charged by outcome, in either order. The first request
// is admitted and held in its handler while 99 more are refused by the
// in-memory policy: one round trip to Redis for the 100 (before: 199).
// Once the first ends, 200, a slot's release is one round trip more, and
// the Redis policy counted the admitted request alone.
func TestHTTPRefusedInProcessMakesNoRoundTripOfAnyKind(t *testing.T) {
	s := newServer(t)
	for _, kind := range []string{"concurrency", "charged"} {
		for _, redisFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/redisFirst=%v", kind, redisFirst), func(t *testing.T) {
				c := s.client(t)
				remote, remaining := remotePolicy(t, c, kind)
				var trips roundTrips
				c.AddHook(&trips)
				limit, err := httplimit.New(httplimit.Config{Key: httplimit.Header("X-API-Key"), Policies: inMemoryFirst(t, remote, redisFirst)})
				require.NoError(t, err)
				entered, release := make(chan struct{}, 1), make(chan struct{})
				srv := httptest.NewServer(limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
					entered <- struct{}{}
					<-release
				})))
				t.Cleanup(srv.Close)
				var once sync.Once
				t.Cleanup(func() { once.Do(func() { close(release) }) }) // before srv.Close, if the test fails
				key := testKey(t, "k")
				get := func() int {
					req, err := http.NewRequest("GET", srv.URL, nil)
					require.NoError(t, err)
					req.Header.Set("X-API-Key", key)
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					resp.Body.Close()
					return resp.StatusCode
				}
				first := make(chan int, 1)
				go func() { first <- get() }()
				<-entered
				codes := map[int]int{}
				for range 99 {
					codes[get()]++
				}
				require.Equal(t, map[int]int{http.StatusTooManyRequests: 99}, codes, "the 99 requests after the first")
				require.Equal(t, int64(1), trips.n.Load(), "round trips for 100 requests")
				once.Do(func() { close(release) })
				require.Equal(t, http.StatusOK, <-first, "the first request")
				wantTrips, wantRemaining := int64(1), 499
				if kind == "concurrency" {
					wantTrips, wantRemaining = 2, 500
				}
				require.Equal(t, wantTrips, trips.n.Load(), "round trips once the first ended")
				require.Equal(t, wantRemaining, remaining(key), "the Redis policy's Remaining once the first ended")
			})
		}
	}
}
