package redislimit_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// keylimit.All of Redis limiters on one client: joined, one script call per
// decision, all or nothing inside Redis.

// unjoinable hides a limiter's type, so that All cannot join it and decides
// limiter by limiter: what it did before the Redis limiters could join.
type unjoinable struct{ redisLimiter }

// TestAllOfRedisLimitersIsOneRoundTrip counts, with INFO commandstats, the
// commands a request with two Redis limits (10 a minute and 3 an hour on
// one API key) sends: one EVALSHA, admitted or refused, where All deciding
// limiter by limiter sends two for an admitted request, and four for one
// the second limit refuses (take, take, the refund of the first, and a
// peek of it for its Result). A refusal the deny cache remembers sends
// nothing; a refund and a reset are one command each.
func TestAllOfRedisLimitersIsOneRoundTrip(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	newPair := func(cache int) (minute, hour redisLimiter) {
		m, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerMinute(10), redislimit.WithPrefix(testKey(t, "minute")+":"),
			redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(cache))
		require.NoError(t, err)
		h, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(3), redislimit.WithPrefix(testKey(t, "hour")+":"),
			redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(cache))
		require.NoError(t, err)
		pinged(t, m) // the eviction check is done: only decisions are counted
		pinged(t, h)
		return m, h
	}
	sent := func(f func()) map[string]int64 {
		before := s.commandStats(t)
		f()
		return s.sentSince(t, before)
	}
	one := map[string]int64{"evalsha": 1}
	key := testKey(t, "api-key")

	minute, hour := newPair(0)
	minute.Allow("warm") // the connection is made and the script loaded
	lim, ok := keylimit.All[string](minute, hour).(joinedLimiter)
	require.True(t, ok, "All of two Redis limiters on one client is not the joined limiter")
	each := make([]keylimit.Result, 2)
	for i := range 3 {
		var r keylimit.Result
		require.Equal(t, one, sent(func() { r, _ = lim.TakeEach(context.Background(), key, 1, each) }), "request %d", i)
		require.True(t, r.Allowed, "request %d: %v", i, r)
		// On Redis time: the first admission leaves the window a little
		// before the newest.
		refill := each[0].RefillAfter
		require.True(t, refill > 0 && refill <= time.Minute && (i > 0 || refill == time.Minute), "request %d: the minute's RefillAfter %v", i, refill)
		each[0].RefillAfter = 0
		require.Equal(t, keylimit.Result{Allowed: true, Limit: 10, Remaining: 9 - i, ResetAfter: time.Minute}, each[0], "request %d: the minute's Result", i)
		require.Equal(t, 3, each[1].Limit, "request %d: the hour's Limit", i)
		require.Equal(t, 2-i, each[1].Remaining, "request %d: the hour's Remaining", i)
	}
	var r keylimit.Result
	require.Equal(t, one, sent(func() { r, _ = lim.TakeEach(context.Background(), key, 1, each) }), "a request the hour refuses")
	require.False(t, r.Allowed, "the fourth request: %v", r)
	require.Equal(t, 3, r.Limit, "the refusal's Limit: the hour's")
	require.Equal(t, 7, each[0].Remaining, "the minute's Remaining after a request the hour refused: nothing taken")
	require.True(t, each[0].Allowed, "the minute's Result: its Peek")
	require.False(t, each[1].Allowed, "the hour's Result")

	var adm keylimit.Admission
	other := testKey(t, "other")
	require.Equal(t, one, sent(func() { _, adm, _ = lim.AdmitContext(context.Background(), other, 2) }), "AdmitContext")
	require.Equal(t, one, sent(func() { require.NoError(t, lim.RefundContext(context.Background(), other, adm)) }), "RefundContext")
	require.Equal(t, one, sent(func() { r = lim.Peek(other) }), "Peek")
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 3, Remaining: 3}, r, "Peek after the refund of the only admission")
	before := s.commandStats(t)
	lim.Reset(key)
	after := s.commandStats(t)
	require.Equal(t, before["del"]+1, after["del"], "Reset: one DEL")
	require.Equal(t, before["evalsha"], after["evalsha"], "Reset: no script call")
	require.Equal(t, 10, minute.Peek(key).Remaining, "the minute's Remaining after the joined Reset")
	// Each limiter counts the joined requests it took part in: 5 requests
	// (4 TakeEach, 1 AdmitContext), 4 admitted. The 8 round trips (those,
	// RefundContext, Peek and Reset) are counted once, by the first
	// limiter, whose client made them: the limiters' Calls add up to what
	// the server saw (with the minute's own two, its warm-up and its Peek).
	st := hour.(interface{ Stats() keylimit.Stats }).Stats()
	require.Equal(t, keylimit.Stats{Decisions: true, Remote: true, Admitted: 4, Refused: 1}, st, "the hour's Stats")
	st = minute.(interface{ Stats() keylimit.Stats }).Stats()
	require.Equal(t, keylimit.Stats{Decisions: true, Remote: true, Admitted: 5, Refused: 1, Calls: 10}, st, "the minute's Stats")

	// With the deny cache: the refusal is remembered, with each Result.
	minute, hour = newPair(redislimit.DefaultDenyCacheSize)
	lim = keylimit.All[string](minute, hour).(joinedLimiter)
	require.True(t, lim.AllowN(key, 3), "AllowN(3)")
	require.False(t, lim.Allow(key), "Allow with the hour used up")
	require.Empty(t, sent(func() { r, _ = lim.TakeEach(context.Background(), key, 1, each) }), "a refusal the deny cache covers")
	require.False(t, r.Allowed, "%v", r)
	require.Equal(t, []int{10, 3}, []int{each[0].Limit, each[1].Limit}, "each Result's Limit, from the deny cache")
	require.Equal(t, 7, each[0].Remaining, "the minute's Remaining, from the deny cache")

	// All deciding limiter by limiter, for comparison.
	minute, hour = newPair(0)
	seq := keylimit.All[string](unjoinable{minute}, unjoinable{hour}).(interface {
		TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
	})
	key = testKey(t, "api-key")
	for i := range 3 {
		require.Equal(t, map[string]int64{"evalsha": 2}, sent(func() { seq.TakeEach(context.Background(), key, 1, each) }),
			"request %d, limiter by limiter", i)
	}
	require.Equal(t, map[string]int64{"evalsha": 4}, sent(func() { seq.TakeEach(context.Background(), key, 1, each) }),
		"a request the hour refuses, limiter by limiter")
}

// TestJoinedMatchesAllInMemory: the joined limiter of a bucket, a fixed
// window and a sliding window gives the Results keylimit.All of the three
// in-memory limiters gives, the combined one and each limiter's, to the
// nanosecond, over a sequence of requests, peeks, refunds and steps of the
// clock that both run on (the scripts' time too). (Without the deny cache,
// whose answers to a refused key carry each limiter's Result as Redis gave
// it when it refused, not as it is now.)
func TestJoinedMatchesAllInMemory(t *testing.T) {
	c := shared.client(t)
	limits := []keylimit.Limit{keylimit.PerSecond(5), keylimit.PerMinute(7), keylimit.Per(3, 10*time.Second)}
	mock := newMock()
	opts := []redislimit.Option{redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock),
		redislimit.WithDenyCacheSize(0)}
	var redisLims, memLims []keylimit.Limiter[string]
	for i, typ := range types {
		rl, err := typ.new(c, limits[i], append(opts, redislimit.WithPrefix(testKey(t, typ.name)+":"))...)
		require.NoError(t, err)
		redisLims = append(redisLims, rl)
	}
	b, err := keylimit.NewTokenBucket[string](limits[0], keylimit.WithClock(mock))
	require.NoError(t, err)
	f, err := keylimit.NewFixedWindow[string](limits[1], keylimit.WithClock(mock))
	require.NoError(t, err)
	w, err := keylimit.NewSlidingWindow[string](limits[2], keylimit.WithClock(mock))
	require.NoError(t, err)
	memLims = append(memLims, b, f, w)
	joined, ok := keylimit.All(redisLims...).(joinedLimiter)
	require.True(t, ok, "All of three Redis limiters on one client is not joined")
	memory := keylimit.All(memLims...)
	memEach := memory.(interface {
		TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
	})
	memRefund := memory.(keylimit.Refunder[string])

	key := testKey(t, "k")
	got, want := make([]keylimit.Result, 3), make([]keylimit.Result, 3)
	var held []keylimit.Admission // the joined limiter's, with the memory's after each
	for step, n := range []int{1, 2, 0, 1, 3, -1, 1, 1, 2, 1, 0, 4, 1, 1, 2, 1, 3, 1} {
		switch {
		case step%5 == 4:
			mock.Add(700 * time.Millisecond)
		case step%7 == 3:
			r, a := joined.Admit(key, 1)
			mr, ma := memRefund.Admit(key, 1)
			require.Equal(t, mr, r, "step %d: Admit", step)
			held = append(held, a, ma)
		case step%6 == 5 && len(held) > 0:
			joined.Refund(key, held[0])
			memRefund.Refund(key, held[1])
			held = held[2:]
		}
		r, err := joined.TakeEach(context.Background(), key, n, got)
		require.NoError(t, err, "step %d", step)
		mr, _ := memEach.TakeEach(context.Background(), key, n, want)
		if i := slices.IndexFunc([]int{5, 7, 3}, func(q int) bool { return n < 0 || n > q }); i >= 0 {
			// Never passes under limiter i: answered without a round trip
			// for i (its Remaining, ResetAfter and RefillAfter unknown, 0), the others'
			// Results their Peeks, as in memory.
			want[i].Remaining, want[i].ResetAfter, want[i].RefillAfter = 0, 0, 0
			require.Equal(t, mr.Allowed, r.Allowed, "step %d, n=%d: Allowed", step, n)
			require.Equal(t, keylimit.InfDuration, r.RetryAfter, "step %d, n=%d: RetryAfter", step, n)
		} else {
			require.Equal(t, mr, r, "step %d, n=%d: the combined Result", step, n)
		}
		require.Equal(t, want, got, "step %d, n=%d: each Result", step, n)
		require.Equal(t, memory.Peek(key), joined.Peek(key), "step %d: Peek", step)
	}
}

// TestJoinNeedsRedisLimitersOnOneClient: All joins only Redis limiters of
// this package on one client under distinct prefixes; otherwise it decides
// limiter by limiter, with the same semantics.
func TestJoinNeedsRedisLimitersOnOneClient(t *testing.T) {
	c := shared.client(t)
	newLim := func(c redis.UniversalClient, prefix string) redisLimiter {
		lim, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(2), redislimit.WithPrefix(prefix), redislimit.WithTimeout(patient))
		require.NoError(t, err)
		return lim
	}
	a, b := newLim(c, testKey(t, "a")+":"), newLim(c, testKey(t, "b")+":")
	mem, err := keylimit.NewTokenBucket[string](keylimit.PerHour(2))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		ls     []keylimit.Limiter[string]
		joined bool
	}{
		{"one client", []keylimit.Limiter[string]{a, b}, true},
		{"two clients", []keylimit.Limiter[string]{a, newLim(shared.client(t), testKey(t, "c")+":")}, false},
		{"one prefix", []keylimit.Limiter[string]{a, newLim(c, prefixOf(a))}, false},
		{"in memory", []keylimit.Limiter[string]{a, mem}, false},
	} {
		lim := keylimit.All(tc.ls...)
		_, joined := lim.(joinedLimiter)
		require.Equal(t, tc.joined, joined && fmtType(lim) == "*redislimit.joined", tc.name)
		key := testKey(t, "k")
		require.True(t, lim.Allow(key), "%s: the first", tc.name)
		if tc.name == "one prefix" {
			// Limiter by limiter on one state: each takes its event.
			require.False(t, lim.Allow(key), "%s: the second", tc.name)
			continue
		}
		require.True(t, lim.Allow(key), "%s: the second", tc.name)
		require.False(t, lim.Allow(key), "%s: the third", tc.name)
	}
}

// TestJoinedWhenRedisFails: while Redis fails, each limiter's failure
// policy answers for it, all or nothing: what the first limiter's fallback
// admitted for a request the second's refuses is given back. Each
// limiter's OnError sees the failure once; the backoff spares Redis the
// rest.
func TestJoinedWhenRedisFails(t *testing.T) {
	c := deadClient(t)
	mock := clock.NewMock()
	var errsA, errsB errorLog
	a, err := redislimit.NewFixedWindow(c, "test", keylimit.PerHour(3), keylimit.WithClock(mock), redislimit.WithOnError(errsA.add))
	require.NoError(t, err)
	b, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(2), keylimit.WithClock(mock), redislimit.WithOnError(errsB.add))
	require.NoError(t, err)
	lim := keylimit.All[string](a, b).(joinedLimiter)
	key := testKey(t, "k")
	r, err := lim.TakeContext(context.Background(), key, 1)
	require.True(t, r.Allowed, "the first request, by the fallbacks: %v", r)
	require.Error(t, err)
	require.True(t, lim.Allow(key), "the second request")
	each := make([]keylimit.Result, 2)
	r, err = lim.TakeEach(context.Background(), key, 1, each)
	require.False(t, r.Allowed, "the third request: the second fallback's quota of 2 is used: %v", r)
	require.ErrorIs(t, err, redislimit.ErrUnavailable)
	require.Equal(t, 2, r.Limit, "the refusal's Limit")
	require.Equal(t, 1, each[0].Remaining, "the first fallback's Remaining: the refused request was given back")
	require.Equal(t, 1, a.Peek(key).Remaining, "the first limiter's fallback, asked alone")
	require.Equal(t, 1, errsA.len(), "the first limiter's OnError")
	require.Equal(t, 1, errsB.len(), "the second limiter's OnError")
}

// serve returns a call of an httplimit middleware of policies, keyed by
// the X-API-Key field, on a test server: the answer to a GET with key,
// and its body.
func serve(t *testing.T, policies ...kquota.Policy) func(key string) (*http.Response, string) {
	t.Helper()
	limit, err := httplimit.New(httplimit.Config{Key: httplimit.Header("X-API-Key"), Policies: policies})
	require.NoError(t, err)
	srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(srv.Close)
	return func(key string) (*http.Response, string) {
		req, err := http.NewRequest("GET", srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		return resp, string(body)
	}
}

// TestHTTPTwoPoliciesOneRoundTrip: through the httplimit middleware, a
// request under two Redis policies costs Redis one script call, admitted
// or refused, and the answer's RateLimit field carries both policies'
// states (no Peek behind it).
func TestHTTPTwoPoliciesOneRoundTrip(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	minute, err := redislimit.NewFixedWindow(c, "api", keylimit.PerMinute(10), redislimit.WithPrefix(testKey(t, "minute")+":"),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	require.NoError(t, err)
	hour, err := redislimit.NewTokenBucket(c, "api", keylimit.PerHour(2), redislimit.WithPrefix(testKey(t, "hour")+":"),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	require.NoError(t, err)
	pinged(t, minute)
	pinged(t, hour)
	minute.Allow("warm")
	call := serve(t, kquota.Policy{Name: "minute", Limiter: minute}, kquota.Policy{Name: "hour", Limiter: hour})
	answers, _ := twoAdmittedOneRefused(t, s, call, testKey(t, "client"), map[string]int64{"evalsha": 1})
	require.Regexp(t, `^"minute";r=8;t=\d+, "hour";r=0;t=\d+$`, answers[1].Header.Get("RateLimit"), "request 1: both policies' states")
}

// twoAdmittedOneRefused asks call three times for key, and requires 200,
// 200, 429, each admission for one EVALSHA on s, the refusal for
// refusalSent; it returns the answers and the refusal's body.
func twoAdmittedOneRefused(t *testing.T, s *server, call func(string) (*http.Response, string), key string, refusalSent map[string]int64) ([]*http.Response, string) {
	t.Helper()
	var answers []*http.Response
	var body string
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		before := s.commandStats(t)
		resp, b := call(key)
		require.Equal(t, want, resp.StatusCode, "request %d", i)
		sent := map[string]int64{"evalsha": 1}
		if want == http.StatusTooManyRequests {
			sent = refusalSent
		}
		require.Equal(t, sent, s.sentSince(t, before), "request %d: Redis's commands", i)
		answers, body = append(answers, resp), b
	}
	return answers, body
}

// warmBucket returns a Redis TokenBucket of l on c, without a deny cache,
// closed when the test ends, its script loaded: each of its decisions is
// then one EVALSHA.
func warmBucket(t *testing.T, c redis.UniversalClient, l keylimit.Limit) *redislimit.TokenBucket {
	t.Helper()
	rl, err := redislimit.NewTokenBucket(c, "api", l, redislimit.WithPrefix(testKey(t, "r")+":"),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	require.NoError(t, err)
	t.Cleanup(func() { rl.Close() })
	pinged(t, rl)
	rl.Allow(testKey(t, "warm"))
	return rl
}

// TestAllOfMemoryAndRedisAsksRedisOnlyWhenMemoryAdmits pins issue 26's
// round trips: keylimit.All of an in-memory limiter and a Redis one asks
// the in-memory one first, in either order given, and does not Peek the
// Redis one on a refusal (Take, Allow). Of 100 requests under a memory
// limit of 1: one EVALSHA in either order (before: 100 with memory first;
// with Redis first 298, a take, a refund and a Peek per refusal, then 199
// without the Peek). TakeEach, which reports the Redis limiter's Result
// too, does not ask it on a refusal in memory either (issue 38: it was one
// Peek; with Redis first once 3, the take, its refund, the Peek): its
// Result is the zero Result. A refusal by Redis gives back the memory
// limiter's take in process.
func TestAllOfMemoryAndRedisAsksRedisOnlyWhenMemoryAdmits(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	for _, redisFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("redisFirst=%v", redisFirst), func(t *testing.T) {
			memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(mock))
			require.NoError(t, err)
			rl := warmBucket(t, c, keylimit.PerHour(1000))
			lim := keylimit.All[string](memory, rl)
			if redisFirst {
				lim = keylimit.All[string](rl, memory)
			}
			key := testKey(t, "k")
			before := s.commandStats(t)
			admitted := 0
			for range 100 {
				if lim.Allow(key) {
					admitted++
				}
			}
			require.Equal(t, 1, admitted, "admitted of 100")
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "Redis's commands for 100 requests")
			require.Equal(t, 999, rl.Peek(key).Remaining, "the Redis limiter's Remaining: the one admission")

			each := make([]keylimit.Result, 2)
			before = s.commandStats(t)
			r, err := lim.(interface {
				TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
			}).TakeEach(context.Background(), key, 1, each)
			require.NoError(t, err)
			require.False(t, r.Allowed, "TakeEach: %v", r)
			require.Empty(t, s.sentSince(t, before), "Redis's commands for a TakeEach refused in memory")
			redisAt := 1
			if redisFirst {
				redisAt = 0
			}
			require.Equal(t, keylimit.Result{}, each[redisAt], "the Redis limiter's Result in TakeEach: not asked")
			require.False(t, each[1-redisAt].Allowed, "the memory limiter's Result in TakeEach")

			// Redis refuses (its key used up): the memory limiter's take is
			// given back, in process.
			full := testKey(t, "full")
			require.True(t, rl.AllowN(full, 1000), "AllowN(1000) of the Redis limiter")
			before = s.commandStats(t)
			require.False(t, lim.Allow(full), "a request Redis refuses")
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "Redis's commands for a request it refuses")
			require.Equal(t, 1, memory.Peek(full).Remaining, "the memory limiter's Remaining after Redis refused: given back")
		})
	}
}

// TestAllRedisFirstRefusedInMemoryUnderContention (issue 26): 32
// goroutines of 100 requests through keylimit.All of a Redis limiter (1000
// an hour) given first and an in-memory one (50 an hour), on a frozen
// clock: exactly 50 admitted, and exactly 50 takes sent to Redis, one per
// admission, none for the 3150 refusals (in up to 50 EVALSHA: takes that
// meet in flight share a script call); the Redis limiter's Stats count
// those 50 calls, and its key has 950 left. No refund was lost or made
// twice.
func TestAllRedisFirstRefusedInMemoryUnderContention(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(50), keylimit.WithClock(newMock()))
	require.NoError(t, err)
	defer memory.Close()
	rl := warmBucket(t, c, keylimit.PerHour(1000))
	lim := keylimit.All[string](rl, memory)
	key := testKey(t, "hot")
	before, calls := s.commandStats(t), rl.Stats().Calls
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 100 {
				if lim.Allow(key) {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 50, admitted.Load(), "admitted of 3200")
	sent := s.sentSince(t, before)
	require.Equal(t, []string{"evalsha"}, slices.Collect(maps.Keys(sent)), "Redis's commands for 3200 requests")
	require.LessOrEqual(t, sent["evalsha"], int64(50), "EVALSHA for 3200 requests")
	require.Equal(t, uint64(50), rl.Stats().Calls-calls, "the Redis limiter's Calls")
	require.Equal(t, 950, rl.Peek(key).Remaining, "the Redis limiter's Remaining")
	require.Equal(t, 0, memory.Peek(key).Remaining, "the memory limiter's Remaining")
}

// TestPenaltiesInAllOfMemoryAndRedis (issue 26): keylimit.All asks an
// in-memory limiter before a Redis one whatever the order given, so which
// penalty sees a refusal follows that order. An in-process
// keylimit.Penalty given after a Redis limiter sees, and counts, a refusal
// both would make, and Redis is not asked; a Penalty on Redis given
// before a memory limiter is not asked when memory refuses (no round
// trip, nothing counted), and counts the refusals of its own limiter,
// the memory limiter's take given back.
func TestPenaltiesInAllOfMemoryAndRedis(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	ban := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}

	t.Run("in-process Penalty after Redis", func(t *testing.T) {
		memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(mock))
		require.NoError(t, err)
		defer memory.Close()
		p, err := keylimit.NewPenalty[string](memory, ban, keylimit.WithClock(mock))
		require.NoError(t, err)
		defer p.Close()
		rl := warmBucket(t, c, keylimit.PerHour(1))
		lim := keylimit.All[string](rl, p)
		key := testKey(t, "k")
		before := s.commandStats(t)
		require.True(t, lim.Allow(key))
		require.False(t, lim.Take(key, 1).Banned, "one refusal")
		r := lim.Take(key, 1)
		require.True(t, r.Banned, "the second refusal, both limiters used up, is the penalty's: %v", r)
		require.Equal(t, time.Hour, r.RetryAfter)
		require.Equal(t, uint64(1), p.Stats().Bans)
		require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "Redis's commands: the admission")
	})

	t.Run("Redis Penalty before memory", func(t *testing.T) {
		p, w := instance(t, c, mock, ban)
		memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(mock))
		require.NoError(t, err)
		defer memory.Close()
		w.Allow(testKey(t, "warm")) // the script loaded
		lim := keylimit.All[string](p, memory)
		key := testKey(t, "k")
		before, calls := s.commandStats(t), p.Stats().Calls
		require.True(t, lim.Allow(key))
		for range 10 {
			r := lim.Take(key, 1)
			require.False(t, r.Allowed)
			require.False(t, r.Banned, "memory refused: %v", r)
		}
		require.Equal(t, map[string]int64{"evalsha": 1}, decisions(s.sentSince(t, before)), "Redis's commands: the admission")
		require.Equal(t, calls+1, p.Stats().Calls, "the penalty's Calls")
		require.Zero(t, p.Stats().Bans)

		// Its window refuses, memory admitting: the penalty counts it.
		other := testKey(t, "other")
		require.True(t, w.Allow(other))
		require.False(t, lim.Take(other, 1).Banned, "one refusal of the window")
		r := lim.Take(other, 1)
		require.True(t, r.Banned, "the window's second refusal bans: %v", r)
		require.Equal(t, uint64(1), p.Stats().Bans)
		require.Equal(t, 1, memory.Peek(other).Remaining, "the memory limiter's takes given back")
	})
}

// TestHTTPRedisPolicyFirstRefusedInMemory (issues 26 and 38): through the
// httplimit middleware, a Redis policy given before an in-memory one: a
// request the memory policy refuses costs Redis no call (was a take, its
// refund and a Peek, then the Peek that reported its state), and the
// answer is 429, RateLimit with the minute alone (the Redis policy's
// state is not known without a call), Retry-After at the minute's end,
// the minute named violated.
func TestHTTPRedisPolicyFirstRefusedInMemory(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	hour := warmBucket(t, c, keylimit.PerHour(100))
	minute, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	require.NoError(t, err)
	defer minute.Close()
	call := serve(t, kquota.Policy{Name: "hour", Limiter: hour}, kquota.Policy{Name: "minute", Limiter: minute})
	key := testKey(t, "client")
	answers, body := twoAdmittedOneRefused(t, s, call, key, map[string]int64{})
	require.Equal(t, `"minute";r=0;t=60`, answers[2].Header.Get("RateLimit"), "the minute's state alone")
	require.Equal(t, "60", answers[2].Header.Get("Retry-After"))
	require.Contains(t, body, `"violated-policies":["minute"]`)
	require.Equal(t, 98, hour.Peek(key).Remaining, "the Redis policy's Remaining: the refusal took nothing")
}

// TestAllOfMemoryAndTwoRedisIsOneRoundTrip: keylimit.All of an in-memory
// limiter and two Redis limiters on one client, in any order given, asks
// the in-memory one first and then both Redis ones in one script call, so
// an admission is one EVALSHA (it was two, one per Redis limiter), with each
// limiter's Result as TakeEach reports it. A refusal by either Redis limiter
// is that same one call, takes nothing from the other, and gives the
// in-memory take back; a TakeEach refused in memory asks neither (issue
// 38), and Peek Peeks both in one call.
func TestAllOfMemoryAndTwoRedisIsOneRoundTrip(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	mock := newMock()
	for _, memAt := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("memoryAt=%d", memAt), func(t *testing.T) {
			memory, err := keylimit.NewTokenBucket[string](keylimit.PerHour(10), keylimit.WithClock(mock))
			require.NoError(t, err)
			minute := warmBucket(t, c, keylimit.PerMinute(1000))
			hour, err := redislimit.NewFixedWindow(c, "api", keylimit.PerHour(20), redislimit.WithPrefix(testKey(t, "h")+":"),
				redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			require.NoError(t, err)
			t.Cleanup(func() { hour.Close() })
			pinged(t, hour)
			hour.Allow(testKey(t, "warm"))
			lims := []keylimit.Limiter[string]{minute, hour}
			lims = append(lims[:memAt], append([]keylimit.Limiter[string]{memory}, lims[memAt:]...)...)
			lim := keylimit.All(lims...)
			at := func(l keylimit.Limiter[string]) int { return slices.Index(lims, l) }

			each := make([]keylimit.Result, 3)
			// takeEach is lim's TakeEach of one event for key, and the
			// commands it sent.
			takeEach := func(key string) (r keylimit.Result, sent map[string]int64) {
				sent = s.sentBy(t, func() {
					var err error
					r, err = lim.(interface {
						TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
					}).TakeEach(context.Background(), key, 1, each)
					require.NoError(t, err)
				})
				return r, sent
			}
			one := map[string]int64{"evalsha": 1}

			key := testKey(t, "k")
			began := time.Now() // minute refills on Redis's real time: see below
			require.Equal(t, map[string]int64{"evalsha": 5}, s.sentBy(t, func() {
				for i := range 5 {
					require.True(t, lim.Allow(key), "request %d", i)
				}
			}), "Redis's commands for 5 admissions")

			r, sent := takeEach(key)
			require.True(t, r.Allowed, "TakeEach: %v", r)
			require.Equal(t, one, sent, "Redis's commands for a TakeEach admitted")
			for _, want := range []struct {
				l                keylimit.Limiter[string]
				limit, remaining int
			}{{memory, 10, 4}, {minute, 1000, 994}, {hour, 20, 14}} {
				got := each[at(want.l)]
				require.True(t, got.Allowed, "%T's Result: %v", want.l, got)
				if want.l == minute {
					// A token comes back every 60 ms of Redis's time, and a busy
					// machine may take that long over six calls: as many more
					// remain as have refilled since the first.
					refilled := int(time.Since(began) / (60 * time.Millisecond))
					require.Equal(t, want.limit, got.Limit, "%T's Limit", want.l)
					require.True(t, got.Remaining >= want.remaining && got.Remaining <= want.remaining+refilled,
						"%T's Remaining: %d, want %d and up to %d refilled", want.l, got.Remaining, want.remaining, refilled)
					continue
				}
				require.Equal(t, [2]int{want.limit, want.remaining}, [2]int{got.Limit, got.Remaining}, "%T's Limit and Remaining", want.l)
			}
			require.Equal(t, [2]int{10, 4}, [2]int{r.Limit, r.Remaining}, "the combined Result: the least Remaining")

			// The hour's window refuses: one call, nothing taken anywhere.
			require.True(t, hour.AllowN(key, 14), "the rest of the hour")
			r, sent = takeEach(key)
			require.False(t, r.Allowed, "TakeEach once the hour is spent: %v", r)
			require.Equal(t, 20, r.Limit, "the refusing limiter's Limit")
			require.Equal(t, one, sent, "Redis's commands for a refusal by Redis")
			require.False(t, each[at(hour)].Allowed, "the hour's Result")
			require.Equal(t, 994, each[at(minute)].Remaining, "the minute's Result: nothing taken")
			require.Equal(t, 4, each[at(memory)].Remaining, "the memory limiter's Result: given back")
			require.Equal(t, 4, memory.Peek(key).Remaining, "the memory limiter: given back")
			require.Equal(t, 994, minute.Peek(key).Remaining, "the minute: nothing taken")

			// Refused in memory: TakeEach asks no Redis limiter (issue 38;
			// it was one Peek of both), and reports them the zero Result.
			other := testKey(t, "other")
			require.True(t, memory.AllowN(other, 10), "the memory limiter's quota")
			require.Empty(t, s.sentBy(t, func() { require.False(t, lim.Allow(other), "Allow refused in memory") }),
				"Redis's commands for an Allow refused in memory")
			r, sent = takeEach(other)
			require.False(t, r.Allowed, "TakeEach refused in memory: %v", r)
			require.Equal(t, 10, r.Limit, "the memory limiter's Limit")
			require.Empty(t, sent, "Redis's commands for a TakeEach refused in memory")
			require.Equal(t, keylimit.Result{}, each[at(minute)], "the minute's Result: not asked")
			require.Equal(t, keylimit.Result{}, each[at(hour)], "the hour's Result: not asked")
			require.False(t, each[at(memory)].Allowed, "the memory limiter's Result")

			var p keylimit.Result
			require.Equal(t, one, s.sentBy(t, func() { p = lim.Peek(other) }), "Redis's commands for a Peek: one of both")
			require.False(t, p.Allowed, "Peek: %v", p)
			require.Equal(t, 10, p.Limit, "Peek: the memory limiter's Limit")
		})
	}
}

// TestHTTPRefusedInMemoryMakesNoRoundTrip (issue 38): an httplimit
// middleware of an in-memory policy of 1 a second and a Redis one of 500
// an hour, in either order: of 100 requests of one key, the in-memory
// policy refuses 99, and Redis runs one script, for the one admitted (it
// was 100: a Peek per refusal, for the Redis policy's fields). A
// refusal's fields leave the Redis policy out.
func TestHTTPRefusedInMemoryMakesNoRoundTrip(t *testing.T) {
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
			call := serve(t, ps...)
			key := testKey(t, "k")
			before := s.commandStats(t)
			codes := map[int]int{}
			var last *http.Response
			for range 100 {
				last, _ = call(key)
				codes[last.StatusCode]++
			}
			require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusTooManyRequests: 99}, codes)
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "Redis's commands for 100 requests")
			require.Equal(t, `"second";r=0;t=1`, last.Header.Get("RateLimit"), "a refusal's RateLimit: without the Redis policy")
			require.Equal(t, `"second";q=1;w=1`, last.Header.Get("RateLimit-Policy"))
		})
	}
}
