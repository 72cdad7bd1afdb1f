package redislimit_test

import (
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestAllCombinesRedisLimits: keylimit.All over two Redis limiters on the
// same key (3 a minute and 5 an hour), which their default prefixes keep
// apart. A request the second refuses is refunded to the first, so over
// two windows' worth of attempts the hour's 5 are admitted, no more, and
// the minute's refusals cost the hour nothing.
func TestAllCombinesRedisLimits(t *testing.T) {
	c := shared.client(t)
	minute, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerMinute(3), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	hour, err := redislimit.NewTokenBucket(c, "test", keylimit.PerHour(5), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	key := testKey(t, "k")
	hour.AllowN(key, 4) // the hour has 1 left; the minute has 3
	both := keylimit.All[string](minute, hour)
	if !both.AllowN(key, 1) {
		t.Fatal("the first request, within both limits, was refused")
	}
	r := both.Take(key, 1)
	if r.Allowed || r.Limit != 5 {
		t.Fatalf("with the hour used up: %+v, want refused by the hour's limit of 5", r)
	}
	if got := minute.Peek(key).Remaining; got != 2 {
		t.Fatalf("the minute's Remaining after a request the hour refused = %d, want 2: the refusal was refunded", got)
	}
}
