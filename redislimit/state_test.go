package redislimit_test

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// redisTime reads the server's clock, in ns since the Unix epoch.
func redisTime(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixNano()
}

// TestBucketIsExactToTheNanosecond: the script keeps the TAT in ns although
// Lua has only doubles. PerSecond(3) refills a token every 333,333,334 ns, a
// number no µs or float clock would keep; the stored TAT is a µs instant
// of Redis time plus exactly 2 intervals, and the Results carry the
// intervals to the ns.
func TestBucketIsExactToTheNanosecond(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewTokenBucket(c, keylimit.PerSecond(3), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	iv := keylimit.PerSecond(3).Interval()
	if iv != 333_333_334 {
		t.Fatalf("Interval = %v, the test expects 333.333334ms", iv)
	}
	key := testKey(t, "k")
	before := redisTime(t, c)
	r := lim.Take(key, 2)
	after := redisTime(t, c)
	if !r.Allowed || r.Remaining != 1 || r.ResetAfter != 2*iv {
		t.Fatalf("Take(2) on a new key = %+v, want allowed, Remaining 1, ResetAfter exactly %v", r, 2*iv)
	}
	stored, err := c.Get(context.Background(), lim.Prefix()+key).Result()
	if err != nil {
		t.Fatal(err)
	}
	tat, ok := new(big.Int).SetString(stored, 10)
	if !ok || len(stored) != 19 {
		t.Fatalf("stored TAT %q, want 19 decimal digits", stored)
	}
	decided := tat.Int64() - int64(2*iv) // the script's now, in ns
	if decided%1000 != 0 || decided < before-1000 || decided > after {
		t.Fatalf("stored TAT %s - 2 intervals = %d, want a whole µs within Redis's [%d, %d]", stored, decided, before, after)
	}

	// Refused: RetryAfter = TAT + 2 intervals - tau - now and ResetAfter =
	// TAT - now, tau being 3 intervals: their difference is exactly one
	// interval, and TAT - ResetAfter is a µs instant.
	r = lim.Take(key, 2)
	if r.Allowed || r.Remaining != 1 || r.ResetAfter-r.RetryAfter != iv {
		t.Fatalf("Take(2) with 1 left = %+v, want refused, Remaining 1, ResetAfter - RetryAfter exactly %v", r, iv)
	}
	if now := tat.Int64() - int64(r.ResetAfter); now%1000 != 0 {
		t.Fatalf("TAT - ResetAfter = %d, not a whole µs", now)
	}
}

// TestKeysExpireWhenFresh: every key a limiter writes expires on its own
// when its state is the same as none: a bucket when full, a fixed window
// when it ends, a sliding log when its newest entry leaves. A refused call
// writes nothing, not even the expiry.
func TestKeysExpireWhenFresh(t *testing.T) {
	c := shared.client(t)
	ctx := context.Background()
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			t.Parallel()
			l := keylimit.Per(2, 2*time.Second)
			lim, err := typ.new(c, l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			if err != nil {
				t.Fatal(err)
			}
			prefix := lim.(interface{ Prefix() string }).Prefix()
			// An attempt counts only if its calls ran well within the state's
			// life (a fixed window may be about to end; a machine may stall);
			// otherwise it is made again on a new key.
			for attempt := 1; ; attempt++ {
				key := testKey(t, "k")
				rkey := prefix + key
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
				if err != nil {
					t.Fatal(err)
				}
				if took := at.end.Sub(at.start); took > r.ResetAfter/4 {
					if attempt == 5 {
						t.Fatalf("5 attempts, the last taking %v of a state that lasts %v: the machine is too slow for this test", took, r.ResetAfter)
					}
					continue
				}
				// PX is ResetAfter rounded up to a whole ms; less has passed
				// than the time the calls took.
				if ceil := r.ResetAfter.Round(time.Millisecond) + time.Millisecond; ttl <= 0 || ttl > ceil ||
					ttl < r.ResetAfter-at.end.Sub(at.start)-time.Millisecond {
					t.Fatalf("after %+v: PTTL %v, want ResetAfter rounded up, less the time passed", r, ttl)
				}
				if !refused {
					t.Fatal("Allow with the quota taken passed")
				}
				if again != dump || ttl2 > ttl {
					t.Fatalf("a refused call changed the key's state or moved its expiry from %v to %v", ttl, ttl2)
				}
				time.Sleep(r.ResetAfter + 20*time.Millisecond)
				if n, _ := c.Exists(ctx, rkey).Result(); n != 0 {
					t.Fatalf("the key still exists %v after ResetAfter %v", r.ResetAfter+20*time.Millisecond, r.ResetAfter)
				}
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
			if err != nil {
				t.Fatal(err)
			}
			refund := lim.(interface{ Refund(string, int) }).Refund
			prefix := lim.(interface{ Prefix() string }).Prefix()
			key := testKey(t, "k")
			lim.AllowN(key, 4)
			lim.AllowN(key, 6)
			refund(key, 3)
			if r := lim.Peek(key); r.Remaining != 3 {
				t.Fatalf("Remaining after taking 10 and refunding 3 = %d, want 3", r.Remaining)
			}
			refund(key, 0)
			refund(key, -5)
			if r := lim.Peek(key); r.Remaining != 3 {
				t.Fatalf("Remaining after refunding 0 and -5 = %d, want 3 still", r.Remaining)
			}
			if !lim.AllowN(key, 3) || lim.Allow(key) {
				t.Fatal("the 3 refunded events were not admitted exactly")
			}
			refund(key, 25)
			if r := lim.Peek(key); r.Remaining != 10 || r.ResetAfter != 0 {
				t.Fatalf("after refunding more than was taken: %+v, want a full quota of 10, no more", r)
			}
			if n, _ := c.Exists(ctx, prefix+key).Result(); n != 0 {
				t.Fatal("a key refunded to a full quota still exists")
			}
			refund(testKey(t, "never-seen"), 2)
			if n, _ := c.Keys(ctx, prefix+testKey(t, "never")+"*").Result(); len(n) != 0 {
				t.Fatalf("refunding a key never seen created %v", n)
			}
			if !lim.AllowN(key, 10) || lim.Allow(key) {
				t.Fatal("after the refunds, the quota is not exactly 10")
			}
		})
	}
}

// TestSlidingRefundTakesTheNewest: a sliding log forgets the newest
// admissions on Refund, so the oldest still decides when the key frees up.
func TestSlidingRefundTakesTheNewest(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewSlidingWindow(c, keylimit.Per(3, time.Hour), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, "k")
	lim.Allow(key)
	first := lim.Peek(key).ResetAfter // the first entry leaves then
	time.Sleep(20 * time.Millisecond)
	lim.AllowN(key, 2)
	lim.Refund(key, 1)
	lim.Allow(key)
	r := lim.Take(key, 1)
	if r.Allowed || r.RetryAfter > first || r.RetryAfter < first-time.Second {
		t.Fatalf("full log whose oldest entry leaves in about %v: %+v; want refused, RetryAfter the oldest entry's", first, r)
	}
}

// TestBucketSideBySideWithMemory runs one sequence of requests on a Redis
// bucket and an in-memory keylimit.TokenBucket of the same limit at about
// the same time: the decisions, Limit and Remaining are the same, and the
// times agree to within the time between the two calls.
func TestBucketSideBySideWithMemory(t *testing.T) {
	l := keylimit.PerMinute(6).WithBurst(4)
	rlim, err := redislimit.NewTokenBucket(shared.client(t), l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	if err != nil {
		t.Fatal(err)
	}
	mlim, err := keylimit.NewTokenBucket[string](l)
	if err != nil {
		t.Fatal(err)
	}
	defer mlim.Close()
	sideBySide(t, rlim, mlim, []int{1, 2, 0, 2, 1, 4, 5, -1, 1, 0})
}

// sideBySide makes the requests (n; 0 means Peek) on both limiters and
// compares the Results. A request that can never pass is answered by the
// Redis limiter without a round trip, so only its decision and RetryAfter
// (InfDuration) are compared.
func sideBySide(t *testing.T, rlim, mlim keylimit.Limiter[string], requests []int) {
	t.Helper()
	key := testKey(t, "k")
	const slack = time.Second // far less than any interval the limits have
	for i, n := range requests {
		var got, want keylimit.Result
		if n == 0 {
			got, want = rlim.Peek(key), mlim.Peek(key)
		} else {
			got, want = rlim.Take(key, n), mlim.Take(key, n)
		}
		impossible := n < 0 || n > want.Limit
		if got.Allowed != want.Allowed || got.Limit != want.Limit || !near(got.RetryAfter, want.RetryAfter, slack) ||
			(!impossible && (got.Remaining != want.Remaining || !near(got.ResetAfter, want.ResetAfter, slack))) {
			t.Fatalf("step %d, n=%d: Redis %+v, memory %+v", i, n, got, want)
		}
	}
}

func near(a, b, slack time.Duration) bool {
	if a == keylimit.InfDuration || b == keylimit.InfDuration {
		return a == b
	}
	return a-b <= slack && b-a <= slack
}

// TestSlidingLargeN: a sliding log admits a request of thousands of events
// in one call (the script pushes them in chunks that Lua's stack can take).
func TestSlidingLargeN(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewSlidingWindow(c, keylimit.PerHour(2500), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, "k")
	if r := lim.Take(key, 2499); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("Take(2499) on a quota of 2500: %+v", r)
	}
	if n, err := c.LLen(context.Background(), lim.Prefix()+key).Result(); err != nil || n != 2499 {
		t.Fatalf("the log holds %d entries (%v), want 2499", n, err)
	}
	if lim.AllowN(key, 2) || !lim.Allow(key) || lim.Allow(key) {
		t.Fatal("after 2499 of 2500: want AllowN(2) refused, Allow admitted, then refused")
	}
}

// TestWindowsSideBySideWithMemory runs one sequence of requests on each
// Redis window and the in-memory keylimit window of the same limit at about
// the same time: the same decisions, Limit and Remaining, and times that
// agree to within the time between the two calls. The fixed windows align
// to the same Unix hour.
func TestWindowsSideBySideWithMemory(t *testing.T) {
	l := keylimit.PerHour(6)
	requests := []int{1, 2, 0, 2, 1, 4, 1, 7, -1, 0, 1}
	c := shared.client(t)
	t.Run("FixedWindow", func(t *testing.T) {
		rlim, err := redislimit.NewFixedWindow(c, l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
		if err != nil {
			t.Fatal(err)
		}
		mlim, err := keylimit.NewFixedWindow[string](l)
		if err != nil {
			t.Fatal(err)
		}
		defer mlim.Close()
		sideBySide(t, rlim, mlim, requests)
	})
	t.Run("SlidingWindow", func(t *testing.T) {
		rlim, err := redislimit.NewSlidingWindow(c, l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
		if err != nil {
			t.Fatal(err)
		}
		mlim, err := keylimit.NewSlidingWindow[string](l)
		if err != nil {
			t.Fatal(err)
		}
		defer mlim.Close()
		sideBySide(t, rlim, mlim, requests)
	})
}
