package redislimit_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestBucketIsExactToTheNanosecond: the script keeps the TAT in ns although
// Lua has only doubles. PerSecond(3) refills a token every 333,333,334 ns, a
// number no µs or float clock would keep; the stored TAT is a µs instant
// of Redis time plus exactly 2 intervals, and the Results carry the
// intervals to the ns.
func TestBucketIsExactToTheNanosecond(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewTokenBucket(c, "test", keylimit.PerSecond(3), redislimit.WithTimeout(patient))
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
