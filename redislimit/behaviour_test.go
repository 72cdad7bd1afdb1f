package redislimit_test

import (
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
)

// TestBehaviour runs the shared behaviour suite against each Redis limiter,
// on Redis server time: the cases that step a clock skip (Redis time cannot
// be moved), refill is checked by sleeping, and contention makes as many
// calls as round trips allow. Each runs with the deny cache on (the
// default) and off, so that the contention case counts Redis's own
// exactness too, not only the cache's.
func TestBehaviour(t *testing.T) {
	t.Parallel() // with the other tests that sleep on real time
	for _, typ := range types {
		for _, cache := range []struct {
			name string
			size int
		}{{"cache", redislimit.DefaultDenyCacheSize}, {"nocache", 0}} {
			t.Run(typ.name+"/"+cache.name, func(t *testing.T) {
				// Most of a run is sleeping on Redis time; the suite's keys
				// carry the test's name, so the runs share nothing.
				t.Parallel()
				c := shared.client(t)
				limitertest.Run(t, limitertest.Harness{
					New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
						return typ.new(c, l, redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(cache.size))
					},
					Attempts: 2_000,
				})
			})
		}
	}
}
