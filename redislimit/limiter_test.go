package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestConstructorErrors: what the constructors refuse, and that they say why.
func TestConstructorErrors(t *testing.T) {
	ignoresDeadlines := redis.NewClient(&redis.Options{Addr: shared.Addr})
	t.Cleanup(func() { ignoresDeadlines.Close() })
	good := shared.client(t)
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		limit  keylimit.Limit
		opts   []redislimit.Option
		want   string
	}{
		{"nil client", nil, keylimit.PerHour(1), nil, "client is nil"},
		{"client ignores deadlines", ignoresDeadlines, keylimit.PerHour(1), nil, "ContextTimeoutEnabled"},
		{"invalid limit", good, keylimit.Per(0, time.Second), nil, "keylimit: events 0 is below 1"},
		{"zero timeout", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithTimeout(0)}, "timeout 0s is not positive"},
		{"negative deny cache", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithDenyCacheSize(-1)}, "deny cache size -1"},
		{"negative backoff", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailureBackoff(-1)}, "backoff -1ns is negative"},
		{"nil clock", good, keylimit.PerHour(1), []redislimit.Option{keylimit.WithClock(nil)}, "WithClock(nil)"},
		{"an in-memory option", good, keylimit.PerHour(1), []redislimit.Option{keylimit.WithMaxKeys(10)}, "WithMaxKeys, WithAdmitUntracked and WithStats are not options of a Redis limiter"},
		{"a longest hold", good, keylimit.PerHour(1), []redislimit.Option{keylimit.WithMaxHold(time.Second)}, "WithMaxHold"},
		{"zero policy", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailurePolicy{})}, "zero FailurePolicy"},
		{"FailLocal(0)", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailLocal(0))}, "FailLocal(0)"},
	} {
		for _, typ := range types {
			lim, err := typ.new(c.client, c.limit, c.opts...)
			require.ErrorContains(t, err, c.want, "%s, %s", typ.name, c.name)
			require.Nil(t, lim, "%s, %s: a limiter came with the error", typ.name, c.name)
		}
	}
	// The other way round: an option of this package's makes a keylimit
	// limiter's constructor fail, and so it does a Concurrency's.
	_, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), redislimit.WithTimeout(time.Second))
	require.ErrorContains(t, err, "keylimit: an option of redislimit is not an option of an in-memory limiter")
	_, err = keylimit.NewConcurrency[string](1, redislimit.WithHoldExpiry(time.Second))
	require.ErrorContains(t, err, "keylimit: an option of redislimit is not an option of an in-memory limiter")
	_, err = redislimit.NewConcurrency(good, "test", 1, keylimit.WithMaxHold(time.Microsecond))
	require.ErrorContains(t, err, "redislimit: longest hold 1µs is below a millisecond")

	_, err = redislimit.NewTokenBucket(good, "test", keylimit.Per(1, 60*24*time.Hour))
	require.ErrorContains(t, err, "redislimit: burst 1 at one event per 1440h0m0s spans more than", "a bucket spanning 60 days")
	for _, typ := range types[1:] {
		_, err := typ.new(good, keylimit.Per(1, 1500*time.Nanosecond))
		require.ErrorContains(t, err, "period 1.5µs is not a whole number of microseconds", typ.name)
	}
}

// TestKeysExpireWhenFresh: every key a limiter writes expires on its own
// when its state is the same as none: a bucket when full, a fixed window
// when it ends (the state of a window's first take of a period of at most a
// second: one period after it), a sliding log when its newest entry leaves
// (or up to an epoch and a ms later: here a second). A refused call
// writes nothing, not even the expiry.
func TestKeysExpireWhenFresh(t *testing.T) {
	t.Parallel() // with the other tests that sleep on real time
	c := shared.client(t)
	ctx := context.Background()
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			t.Parallel()
			l := keylimit.Per(2, time.Second)
			lim, err := typ.new(c, l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			require.NoError(t, err)
			// An attempt counts only if its calls ran well within the state's
			// life (a fixed window may be about to end; a machine may stall);
			// otherwise it is made again on a new key.
			for attempt := 1; ; attempt++ {
				key := testKey(t, "k")
				rkey := stateKey(lim, key)
				var r keylimit.Result
				var ttl, ttl2 time.Duration
				var dump, again string
				var refused bool
				at := timed(func() {
					r = lim.Take(key, 2)
					ttl, err = c.PTTL(ctx, rkey).Result()
					dump, _ = c.Dump(ctx, rkey).Result()
					refused = !lim.Allow(key)
					again, _ = c.Dump(ctx, rkey).Result()
					ttl2, _ = c.PTTL(ctx, rkey).Result()
				})
				require.NoError(t, err)
				if took := at.end.Sub(at.start); took > r.ResetAfter/4 {
					require.False(t, attempt == 5, "5 attempts, the last taking %v of a state that lasts %v: the machine is too slow for this test", took, r.ResetAfter)
					continue
				}
				// PX is ResetAfter rounded up to a whole ms; less has passed
				// than the time the calls took. (The state of a fixed
				// window's first take expires one period after it, here a
				// second: it outlives its window by less than a period.)
				ceil := r.ResetAfter.Round(time.Millisecond) + time.Millisecond
				if typ.name == "FixedWindow" {
					ceil = l.Period
				}
				if typ.name == "SlidingWindow" {
					ceil += time.Second + time.Millisecond // the log's epoch, and a ms
				}
				require.False(t, ttl <= 0 || ttl > ceil || ttl < r.ResetAfter-at.end.Sub(at.start)-time.Millisecond,
					"after %v: PTTL %v, want ResetAfter rounded up, less the time passed", r, ttl)
				require.True(t, refused, "Allow with the quota taken passed")
				require.False(t, again != dump || ttl2 > ttl, "a refused call changed the key's state or moved its expiry from %v to %v", ttl, ttl2)
				time.Sleep(max(r.ResetAfter, ttl) + 20*time.Millisecond)
				n, err := c.Exists(ctx, rkey).Result()
				require.NoError(t, err)
				require.Zero(t, n, "the key still exists 20ms after ResetAfter %v and PTTL %v", r.ResetAfter, ttl)
				return
			}
		})
	}
}

// TestRefund: Refund gives back what was taken, never more: a bucket is
// never above full, a window never below empty; refunding everything
// deletes the key, and refunding a key never seen creates nothing.
func TestRefund(t *testing.T) {
	c := shared.client(t)
	ctx := context.Background()
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(c, keylimit.PerHour(10), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			refunder := lim.(keylimit.Refunder[string])
			key := testKey(t, "k")
			_, four := refunder.Admit(key, 4)
			_, six := refunder.Admit(key, 6)
			refunder.Refund(key, four)
			require.Equal(t, 4, lim.Peek(key).Remaining, "Remaining after taking 4 and 6 and refunding the 4")
			refunder.Refund(key, keylimit.Admission{})
			require.Equal(t, 4, lim.Peek(key).Remaining, "Remaining after refunding nothing")
			require.True(t, lim.AllowN(key, 4), "AllowN(4) after refunding the 4")
			require.False(t, lim.Allow(key), "Allow after taking the 4 refunded events again")
			refunder.Refund(key, six)
			require.Equal(t, 6, lim.Peek(key).Remaining, "Remaining after refunding the 6 too")
			lim.Reset(key)
			_, all := refunder.Admit(key, 10)
			refunder.Refund(key, all)
			r := lim.Peek(key)
			require.True(t, r.Remaining == 10 && r.ResetAfter == 0, "after refunding all that was taken: %v, want a full quota of 10, no more", r)
			n, err := c.Exists(ctx, stateKey(lim, key)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "a key refunded to a full quota still exists")
			never := testKey(t, "never-seen")
			refunder.Refund(never, six)
			n, err = c.Exists(ctx, stateKey(lim, never)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "refunding a key never seen created it")
			require.True(t, lim.AllowN(key, 10), "AllowN(10) after the refunds")
			require.False(t, lim.Allow(key), "Allow after 10 of 10")
		})
	}
}

// TestSideBySideWithMemory runs one sequence of requests on each Redis
// limiter and the in-memory keylimit limiter of the same type and limit at
// about the same time: the same decisions, Limit and Remaining, and times
// that agree to within the time between the two calls. The fixed windows
// align to the same Unix hour.
func TestSideBySideWithMemory(t *testing.T) {
	c := shared.client(t)
	for _, tc := range []struct {
		name     string
		l        keylimit.Limit
		memory   func(keylimit.Limit) (keylimit.Limiter[string], error)
		requests []int // n for Take; 0 means Peek
	}{
		{"TokenBucket", keylimit.PerMinute(6).WithBurst(4), func(l keylimit.Limit) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](l)
		}, []int{1, 2, 0, 2, 1, 4, 5, -1, 1, 0}},
		{"FixedWindow", keylimit.PerHour(6), func(l keylimit.Limit) (keylimit.Limiter[string], error) {
			return keylimit.NewFixedWindow[string](l)
		}, []int{1, 2, 0, 2, 1, 4, 1, 7, -1, 0, 1}},
		{"SlidingWindow", keylimit.PerHour(6), func(l keylimit.Limit) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingWindow[string](l)
		}, []int{1, 2, 0, 2, 1, 4, 1, 7, -1, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rlim, err := typeNamed(tc.name)(c, tc.l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			require.NoError(t, err)
			mlim, err := tc.memory(tc.l)
			require.NoError(t, err)
			defer mlim.(interface{ Close() error }).Close()
			sideBySide(t, rlim, mlim, tc.requests)
		})
	}
}

// TestRefundEachAdmissionOnce pins issue 24.3 for the Redis limiters: each
// Refund of one Admission gave back its events again, taken from the other
// admissions (a window counted down to empty: 10 more on a quota of 10). A
// second Refund of an Admission now gives nothing, on every type, joined
// (keylimit.All), and from the fallback while Redis fails (FailLocal).
func TestRefundEachAdmissionOnce(t *testing.T) {
	c := shared.client(t)
	check := func(t *testing.T, lim keylimit.Limiter[string]) {
		refunder := lim.(keylimit.Refunder[string])
		key := testKey(t, "k")
		_, first := refunder.Admit(key, 1)
		require.True(t, lim.AllowN(key, 9), "9 more of 10")
		for range 100 {
			refunder.Refund(key, first)
		}
		again := drain(t, lim, key)
		t.Logf("after 100 Refunds of one admission of 1, %d more admitted", again)
		require.Equal(t, 1, again, "admitted after 100 Refunds of one admission of 1")
	}
	onEachRefunder(t, c, check)
	t.Run("Fallback", func(t *testing.T) {
		lim, err := redislimit.NewFixedWindow(deadClient(t), "test", keylimit.PerHour(10), redislimit.WithOnError(func(error) {}))
		require.NoError(t, err)
		check(t, lim)
	})
}

// TestRefundTheAdmissionsOwnKey pins issue 24.4: Refund(kb, a), a made for
// ka, gave back to kb with ka's mark (kb admitted 20 against 10 after 100
// such refunds), where the in-memory limiters refund the Admission's own
// key. An Admission is bound to its key now: refunded under another, it
// gives nothing, on every type and joined.
func TestRefundTheAdmissionsOwnKey(t *testing.T) {
	c := shared.client(t)
	check := func(t *testing.T, lim keylimit.Limiter[string]) {
		refunder := lim.(keylimit.Refunder[string])
		ka, kb := testKey(t, "a"), testKey(t, "b")
		_, a := refunder.Admit(ka, 1)
		require.True(t, lim.AllowN(kb, 10), "10 of 10 for kb")
		for range 100 {
			refunder.Refund(kb, a)
		}
		more := drain(t, lim, kb)
		t.Logf("kb admitted %d against 10 after 100 Refunds of ka's admission under kb", 10+more)
		require.Zero(t, more, "kb's admissions after 100 Refunds of ka's admission under kb")
		refunder.Refund(ka, a)
		require.Equal(t, 10, lim.Peek(ka).Remaining, "ka after the Refund of its own admission")
	}
	onEachRefunder(t, c, check)
}

// onEachRefunder runs check, each in a subtest, on a limiter of 10 an hour
// on c of each type, and on keylimit.All of two, joined.
func onEachRefunder(t *testing.T, c redis.UniversalClient, check func(*testing.T, keylimit.Limiter[string])) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(c, keylimit.PerHour(10), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			check(t, lim)
		})
	}
	t.Run("Joined", func(t *testing.T) {
		check(t, joinedPair(t, c))
	})
}

// joinedPair returns keylimit.All of two Redis limiters of 10 an hour on c,
// joined.
func joinedPair(t *testing.T, c redis.UniversalClient) keylimit.Limiter[string] {
	a, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(10), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	b, err := redislimit.NewFixedWindow(c, "test", keylimit.PerHour(10), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	lim := keylimit.All[string](a, b)
	_, joined := lim.(joinedLimiter)
	require.True(t, joined, "All of two Redis limiters on one client")
	return lim
}
