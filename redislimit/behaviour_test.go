package redislimit_test

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// newFunc is a Redis limiter constructor as the tests use them.
type newFunc func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error)

// types are the three Redis limiters, for the tests that run on each.
var types = []struct {
	name string
	new  newFunc
}{
	{"TokenBucket", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewTokenBucket(c, l, opts...))
	}},
	{"FixedWindow", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewFixedWindow(c, l, opts...))
	}},
	{"SlidingWindow", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewSlidingWindow(c, l, opts...))
	}},
}

// nilIfErr turns a typed nil pointer into a nil interface, so that the
// suite's "no limiter with an error" check sees what a caller would.
func nilIfErr[L keylimit.Limiter[string]](lim L, err error) (keylimit.Limiter[string], error) {
	if err != nil {
		return nil, err
	}
	return lim, nil
}

// TestBehaviour runs the shared behaviour suite against each Redis limiter,
// on Redis server time: the cases that step a clock skip (Redis time cannot
// be moved), refill is checked by sleeping, and contention makes as many
// calls as round trips allow. Each runs with the deny cache on (the
// default) and off, so that the contention case counts Redis's own
// exactness too, not only the cache's.
func TestBehaviour(t *testing.T) {
	for _, typ := range types {
		for _, cache := range []struct {
			name string
			size int
		}{{"cache", redislimit.DefaultDenyCacheSize}, {"nocache", 0}} {
			t.Run(typ.name+"/"+cache.name, func(t *testing.T) {
				c := shared.client(t)
				limitertest.Run(t, limitertest.Harness{
					New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
						// A generous timeout: under -race on a busy machine a
						// slow round trip must not turn into a fallback decision.
						return typ.new(c, l, redislimit.WithTimeout(10*time.Second), redislimit.WithDenyCacheSize(cache.size))
					},
					Attempts: 2_000,
				})
			})
		}
	}
}
