package redislimit_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// instance is one instance's penalty around its fixed window, both on Redis.
// loginPenalty is the prefix of the keys of a Penalty named "login" (an
// instance's): NewPenalty's default.
const loginPenalty = "keylimit:login:penalty:"

func instance(t *testing.T, c redis.UniversalClient, mock *clock.Mock, b keylimit.Ban, opts ...redislimit.Option) (*keylimit.Penalty[string], *redislimit.FixedWindow) {
	t.Helper()
	opts = append([]redislimit.Option{redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithScriptClock(mock)}, opts...)
	w, err := redislimit.NewFixedWindow(c, "login", keylimit.PerHour(1), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	p, err := redislimit.NewPenalty(c, "login", w, b, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p, w
}

// decisions is sent without the CONFIG GETs of a new limiter's check of
// the server (health.go), which runs in the background.
func decisions(sent map[string]int64) map[string]int64 {
	delete(sent, "config|get")
	return sent
}

// TestPenaltyFleetSharesOneBan: refusals on one instance ban the key on
// Redis; the other instances hear of it (and one that did not learns it
// from its limiter's first refusal), and then answer the key in process:
// INFO commandstats counts no EVALSHA, no command at all, over a flood.
func TestPenaltyFleetSharesOneBan(t *testing.T) {
	s := newServer(t) // its own server: commandstats counts only this test
	mock := newMock()
	b := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}
	a, _ := instance(t, s.client(t), mock, b)
	other, _ := instance(t, s.client(t), mock, b)
	key := testKey(t, "alice")

	require.True(t, a.Allow(key))
	r := a.Take(key, 1)
	require.False(t, r.Allowed)
	require.False(t, r.Banned, "one refusal: %v", r)
	r = a.Take(key, 1)
	require.True(t, r.Banned, "two refusals within a minute: %v", r)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, uint64(1), a.Stats().Bans)

	require.Eventually(t, func() bool { return other.Peek(key).Banned }, patient, time.Millisecond,
		"the other instance hears of the ban")
	before := s.commandStats(t)
	const flood = 1000
	for i := range flood {
		for _, p := range []*keylimit.Penalty[string]{a, other} {
			r := p.Take(key, 1+i%3)
			require.True(t, r.Banned, "flood call %d: %v", i, r)
			require.Equal(t, 1, r.Limit)
		}
	}
	after := s.commandStats(t)
	require.Equal(t, before["evalsha"], after["evalsha"], "EVALSHA while the ban is known")
	require.Empty(t, decisions(s.sentSince(t, before)), "commands sent while the ban is known")
	require.Equal(t, uint64(flood), a.Stats().BanRefused)
	require.Equal(t, uint64(flood), other.Stats().BanRefused)
	require.Zero(t, other.Stats().Bans, "the ban is a's")

	// An instance made after the announcement learns the ban at its
	// limiter's first refusal: one call for the window, one to count.
	late, _ := instance(t, s.client(t), mock, b)
	stats := s.commandStats(t)
	r = late.Take(key, 1)
	require.True(t, r.Banned, "%v", r)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, map[string]int64{"evalsha": 2}, decisions(s.sentSince(t, stats)))
	stats = s.commandStats(t)
	require.True(t, late.Take(key, 1).Banned)
	require.Empty(t, decisions(s.sentSince(t, stats)), "then it knows")

	// The ban ends on every instance at once; the next window admits.
	mock.Add(time.Hour - time.Nanosecond)
	require.True(t, other.Take(key, 1).Banned)
	mock.Add(time.Nanosecond)
	require.True(t, other.Allow(key), "the ban and the window are over")
	r = a.Take(key, 1)
	require.False(t, r.Allowed)
	require.False(t, r.Banned, "the refusals count afresh after a ban: %v", r)
}

// TestPenaltyPolicyWindow: a quota policy of a Penalty without a Window
// announces the window of the limiter it wraps (an hour), as for a
// keylimit.Penalty.
func TestPenaltyPolicyWindow(t *testing.T) {
	s := newServer(t)
	p, _ := instance(t, s.client(t), newMock(), keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	d, err := kquota.New(kquota.Config{Policies: []kquota.Policy{{Name: "login", Limiter: p}}})
	require.NoError(t, err)
	v, err := d.Decide(t.Context(), testKey(t, "k"), "", 1)
	require.NoError(t, err)
	defer v.Finish()
	require.Equal(t, `"login";q=1;w=3600`, v.RateLimitPolicy())
}

// TestPenaltyResetFailureCounted: a Reset that cannot reach Redis forgets
// the key here, and counts its call and its error in Stats.
func TestPenaltyResetFailureCounted(t *testing.T) {
	inner, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(1))
	require.NoError(t, err)
	p, err := redislimit.NewPenalty(deadClient(t), "test", inner, keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour},
		redislimit.WithTimeout(patient))
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.Allow("k"))
	before := p.Stats()
	p.Reset("k")
	st := p.Stats()
	require.Equal(t, before.Calls+1, st.Calls, "Calls after a Reset with Redis down")
	require.Equal(t, before.Errors+1, st.Errors, "Errors after a Reset with Redis down")
	require.True(t, p.Allow("k"), "the limiter's key is reset")
}

// TestPenaltyResetLiftsTheBan: Reset forgets the ban on Redis and here.
func TestPenaltyResetLiftsTheBan(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	p, _ := instance(t, s.client(t), mock, keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	key := testKey(t, "k")
	require.True(t, p.Allow(key))
	require.True(t, p.Take(key, 1).Banned)
	p.Reset(key)
	require.True(t, p.Allow(key))
	n, err := s.client(t).Exists(t.Context(), loginPenalty+"{"+key+"}", loginPenalty+"{"+key+"}:ban").Result()
	require.NoError(t, err)
	require.Zero(t, n, "no state left on Redis")
}

// TestPenaltyUnderConcurrentTakes: two instances, many goroutines each, on
// one key: the admissions are exactly the shared window's, one ban starts
// (the script counts atomically), and every request is the window's or a
// ban's.
func TestPenaltyUnderConcurrentTakes(t *testing.T) {
	s := newServer(t)
	mock := newMock() // stands still: one window, one ban
	b := keylimit.Ban{Refusals: 5, Within: time.Minute, For: time.Hour}
	var fleet [2]*keylimit.Penalty[string]
	for i := range fleet {
		fleet[i], _ = instance(t, s.client(t), mock, b)
	}
	key := testKey(t, "hot")
	const goroutines, each = 8, 50
	var admitted, banned atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 * goroutines {
		p := fleet[i%2]
		wg.Go(func() {
			for range each {
				switch r := p.Take(key, 1); {
				case r.Allowed:
					admitted.Add(1)
				case r.Banned:
					banned.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), admitted.Load(), "the window's one event")
	var bans, requests uint64
	for _, p := range fleet {
		st := p.Stats() // the window's decisions, and the ban's refusals among the refused
		bans += st.Bans
		requests += st.Admitted + st.Refused
	}
	require.Equal(t, uint64(1), bans, "bans started")
	require.Equal(t, uint64(2*goroutines*each), requests, "every request is the window's or a ban's")
	require.Positive(t, banned.Load())
}

// penaltyOnCluster: on Redis Cluster, a key's refusals and its ban share
// the key's slot (one script call each), for keys on every master, and
// the ban is announced to an instance on another client.
func penaltyOnCluster(t *testing.T, cl *redisserver.Cluster) {
	b := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}
	prefix := testKey(t, "pen") + ":"
	newInstance := func() *keylimit.Penalty[string] {
		c := clusterClient(t, cl)
		w, err := redislimit.NewFixedWindow(c, "login", keylimit.PerHour(1), redislimit.WithTimeout(patient),
			redislimit.WithPrefix(prefix+"w:"))
		require.NoError(t, err)
		t.Cleanup(func() { w.Close() })
		p, err := redislimit.NewPenalty(c, "login", w, b, redislimit.WithTimeout(patient), redislimit.WithPrefix(prefix+"p:"))
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		return p
	}
	a, other := newInstance(), newInstance()
	c := clusterClient(t, cl)
	nodes := map[string]bool{}
	for i := 0; len(nodes) < len(cl.Masters); i++ {
		require.Less(t, i, 100, "100 keys, and not one on each master")
		key := testKey(t, "k")
		node, err := c.MasterForKey(context.Background(), prefix+"p:{"+key+"}")
		require.NoError(t, err)
		nodes[node.Options().Addr] = true
		require.True(t, a.Allow(key))
		require.False(t, a.Take(key, 1).Banned)
		r := a.Take(key, 1)
		require.True(t, r.Banned, "%s: %v", key, r)
		require.Eventually(t, func() bool { return other.Peek(key).Banned }, patient, time.Millisecond,
			"the other instance hears of the ban of %s", key)
		require.True(t, other.Take(key, 1).Banned)
	}
	require.Zero(t, a.Stats().Errors, "no CROSSSLOT, no failed call")
}

// TestPenaltyInAllAndWait: in keylimit.All the ban refuses the combination
// and the other limiter's refusal gives back the penalty's limiter's
// event; a wait on a banned key that cannot outlast the ban fails at once.
func TestPenaltyInAllAndWait(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	p, w := instance(t, s.client(t), mock, keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	second, err := redislimit.NewTokenBucket(s.client(t), "second", keylimit.PerHour(1), redislimit.WithTimeout(patient),
		keylimit.WithClock(mock), redislimit.WithScriptClock(mock))
	require.NoError(t, err)
	defer second.Close()
	key := testKey(t, "k")
	require.True(t, second.Allow(key))
	both := keylimit.All[string](p, second)
	require.False(t, both.Allow(key), "the second refuses")
	require.True(t, w.Peek(key).Allowed, "the window got its event back")
	require.True(t, p.Allow(key))
	r := both.Take(key, 1)
	require.True(t, r.Banned, "the window's refusal bans: %v", r)
	require.True(t, both.Take(key, 1).Banned)

	ctx, cancel := mock.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.ErrorIs(t, keylimit.WaitN[string](ctx, p, key, 1), keylimit.ErrWouldExceedDeadline)
}

// TestPenaltyBehaviour: a Redis penalty whose ban never starts is its
// limiter: the behaviour suite passes through it, refusals counted on
// Redis and all, for each Redis limiter type.
func TestPenaltyBehaviour(t *testing.T) {
	c := shared.client(t)
	never := keylimit.Ban{Refusals: keylimit.MaxBanRefusals, Within: time.Nanosecond, For: time.Hour}
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			runSuite(t, c, func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
				inner, err := typ.new(c, l, opts...)
				if err != nil {
					return nil, err
				}
				p, err := redislimit.NewPenalty(c, "test", inner, never, opts...)
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { inner.(interface{ Close() error }).Close() })
				return p, nil
			})
		})
	}
}

// publishUntilKnown publishes on p's channel an announcement of key's ban,
// which Redis holds, until p knows it: every announcement published on the
// channel before the first of them has been read by then (a subscriber
// reads its channel in order). It is published again because an instance
// may drop an announcement it has no room to check.
func publishUntilKnown(t *testing.T, c redis.UniversalClient, p *keylimit.Penalty[string], key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		require.NoError(t, c.Publish(t.Context(), loginPenalty+"bans", "1 7 sync "+key).Err())
		return p.Peek(key).Banned
	}, patient, 10*time.Millisecond, "p hears of the ban of %s", key)
}

// TestPenaltyIgnoresForgedBans pins issue 37.1: a penalty banned any key a
// message on its channel named, for as long as the message said (about
// 320,000 hours against a Ban.For of 10 s), with no ban on Redis. A plain
// client's PUBLISH, from database 0 or from another (Pub/Sub ignores
// SELECT), bans nothing now, lifts no ban, and a ban Redis holds is never
// known for longer than Ban.For, nor with another limit than its
// limiter's, whatever the message says.
func TestPenaltyIgnoresForgedBans(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	b := keylimit.Ban{Refusals: 1, Within: time.Minute, For: 10 * time.Second}
	a, _ := instance(t, s.client(t), mock, b)
	other, _ := instance(t, s.client(t), mock, b)
	plain := s.client(t)
	otherDB := redis.NewClient(&redis.Options{Addr: s.Addr, DB: 3})
	t.Cleanup(func() { otherDB.Close() })
	channel := loginPenalty + "bans"
	const huge = "1152921504606846" // µs: 2^60 ns, 36 years

	banned := testKey(t, "banned")
	require.True(t, a.Allow(banned))
	require.True(t, a.Take(banned, 1).Banned, "the limiter's refusal bans")
	publishUntilKnown(t, plain, other, banned)

	forged, fromDB3 := testKey(t, "forged"), testKey(t, "db3")
	for _, m := range []struct {
		c   redis.UniversalClient
		msg string
	}{
		{plain, huge + " 1 x " + forged},
		{otherDB, huge + " 1 x " + fromDB3},
		{plain, huge + " 500 x " + banned}, // a longer ban than Redis holds, and another limit
		{otherDB, "0 9 x " + banned},       // a ban lifted that is not
	} {
		require.NoError(t, m.c.Publish(t.Context(), channel, m.msg).Err())
	}
	last := testKey(t, "last")
	require.True(t, a.Allow(last))
	require.True(t, a.Take(last, 1).Banned)
	publishUntilKnown(t, plain, other, last) // the forged messages are read

	for _, key := range []string{forged, fromDB3} {
		r := other.Peek(key)
		require.False(t, r.Banned, "%s, named by a forged message: %v", key, r)
		require.True(t, other.Allow(key), "%s, named by a forged message", key)
	}
	r := other.Peek(banned)
	require.True(t, r.Banned, "a ban Redis holds, after a forged lifting: %v", r)
	require.LessOrEqual(t, r.RetryAfter, b.For, "a ban Redis holds, after a forged one of 36 years")
	require.Equal(t, 1, r.Limit, "a ban Redis holds reports its limiter's limit, not a message's")
	require.Zero(t, other.Stats().Bans, "bans other started")
	n, err := plain.Exists(t.Context(), loginPenalty+"{"+forged+"}:ban").Result()
	require.NoError(t, err)
	require.Zero(t, n, "a ban key of a forged ban")
}

// TestPenaltyResetReachesTheFleet: a Reset on one instance lifts the ban
// on the others too, which hear of it and check with Redis.
func TestPenaltyResetReachesTheFleet(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	b := keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour}
	a, _ := instance(t, s.client(t), mock, b)
	other, _ := instance(t, s.client(t), mock, b)
	key := testKey(t, "k")
	require.True(t, a.Allow(key))
	require.True(t, a.Take(key, 1).Banned)
	require.Eventually(t, func() bool { return other.Peek(key).Banned }, patient, time.Millisecond, "other hears of the ban")
	a.Reset(key)
	require.Eventually(t, func() bool { return !other.Peek(key).Banned }, patient, time.Millisecond, "other hears of the Reset")
}

// TestPenaltyForgedFloodIsBounded pins issue 37.1's 37 MB: 200,000 forged
// announcements, each of another key, grew an instance's heap by what its
// deny cache holds for 100,000 keys. They now cost a bounded queue of keys
// to check, whatever is published: the heap grows by less than 4 MB.
func TestPenaltyForgedFloodIsBounded(t *testing.T) {
	s := newServer(t)
	mock := newMock()
	b := keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour}
	a, _ := instance(t, s.client(t), mock, b)
	other, _ := instance(t, s.client(t), mock, b)
	plain := s.client(t)
	channel := loginPenalty + "bans"
	last := testKey(t, "last")
	require.True(t, a.Allow(last))
	require.True(t, a.Take(last, 1).Banned)

	before := heapAlloc()
	const forged, batch = 200_000, 1_000
	for i := 0; i < forged; i += batch {
		pipe := plain.Pipeline()
		for j := i; j < i+batch; j++ {
			pipe.Publish(t.Context(), channel, "3600000000 1 x forged/"+strconv.Itoa(j))
		}
		_, err := pipe.Exec(t.Context())
		require.NoError(t, err)
	}
	publishUntilKnown(t, plain, other, last)
	// Measured again for up to 5 s, as the deny cache's heap is: one
	// reading counts what other tests' goroutines, and messages still on
	// their way to the subscriber, hold at that moment. A penalty that kept
	// what it heard holds it at every reading.
	const bound = 4 << 20
	after := heapAlloc()
	grown := int64(after) - int64(before)
	for deadline := time.Now().Add(5 * time.Second); grown >= bound && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = heapAlloc()
		grown = int64(after) - int64(before)
	}
	t.Logf("heap before %.1f MB, after %d forged announcements %.1f MB", float64(before)/1e6, forged, float64(after)/1e6)
	require.Less(t, grown, int64(bound), "heap bytes grown by %d forged announcements", forged)
	for _, j := range []int{0, forged / 2, forged - 1} {
		require.False(t, other.Peek("forged/"+strconv.Itoa(j)).Banned, "forged/%d", j)
	}
}

// heapAlloc returns the bytes of live heap objects, after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestPenaltyBanEndsOnRedisTime pins issue 37.7 for the bans an instance
// knows: with a local clock (WithClock) that stands still while Redis's
// runs, a ban Redis ended was still known, forever.
func TestPenaltyBanEndsOnRedisTime(t *testing.T) {
	s := newServer(t)
	mock := newMock() // stands still
	b := keylimit.Ban{Refusals: 2, Within: time.Minute, For: 500 * time.Millisecond}
	opts := []redislimit.Option{redislimit.WithTimeout(patient), keylimit.WithClock(mock)}
	prefix := testKey(t, "p") + ":"
	w, err := redislimit.NewFixedWindow(s.client(t), "login", keylimit.PerHour(1), append(opts, redislimit.WithPrefix(prefix+"w:"))...)
	require.NoError(t, err)
	defer w.Close()
	p, err := redislimit.NewPenalty(s.client(t), "login", w, b, append(opts, redislimit.WithPrefix(prefix+"p:"))...)
	require.NoError(t, err)
	defer p.Close()
	key := testKey(t, "k")
	require.True(t, p.Allow(key))
	require.False(t, p.Take(key, 1).Banned, "one refusal")
	r := p.Take(key, 1)
	require.True(t, r.Banned, "two: %v", r)
	require.Equal(t, b.For, p.Peek(key).RetryAfter, "the ban known, on a local clock that stands still")
	time.Sleep(b.For + 10*time.Millisecond) // Redis's time passes, the mock's does not
	r = p.Peek(key)
	require.False(t, r.Banned, "Peek once Redis's ban is over: %v", r)
	r = p.Take(key, 1)
	require.False(t, r.Banned, "Take once Redis's ban is over: %v", r)
	require.False(t, r.Allowed, "the window's refusal, the first since the ban: %v", r)
}

// TestPenaltyPassesTheLimitersErrors: a Penalty over a Redis limiter
// whose Redis is down returns the limiter's errors from its context
// variants, as the limiter does: a Peek that failed says so.
func TestPenaltyPassesTheLimitersErrors(t *testing.T) {
	lim, err := redislimit.NewFixedWindow(deadClient(t), "penalty-errors", keylimit.PerHour(10),
		redislimit.WithFailurePolicy(redislimit.FailOpen()), redislimit.WithTimeout(50*time.Millisecond))
	require.NoError(t, err)
	defer lim.Close()
	p, err := redislimit.NewPenalty(deadClient(t), "penalty-errors", lim, keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Minute})
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()
	_, want := lim.PeekContext(ctx, "k")
	require.Error(t, want, "the limiter's PeekContext, Redis down")
	_, err = p.PeekContext(ctx, "k")
	require.ErrorAs(t, err, new(*redislimit.Error), "the penalty's PeekContext")
	r, _, err := p.AdmitContext(ctx, "k", 1)
	require.ErrorAs(t, err, new(*redislimit.Error), "the penalty's AdmitContext")
	require.True(t, r.Allowed, "FailOpen admits")
}
