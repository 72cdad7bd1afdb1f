package redislimit_test

import (
	"testing"

	"github.com/keylimit/keylimit/redislimit"
)

// TestBehaviour runs the shared behaviour suite, every case of it, against
// each Redis limiter, on a clock the test steps: the scripts take the time
// from it instead of Redis's TIME (WithScriptClock, in the tests only), so
// the cases that step the clock back and forth run too, and nothing sleeps.
// Each runs with the deny cache on (the default) and off, so that the
// contention cases count Redis's own exactness too, not only the cache's.
// (The scripts' production path, on TIME, is what every other test runs
// on: side by side with memory, expiry, boundaries, the fleet, examples.)
func TestBehaviour(t *testing.T) {
	c := shared.client(t)
	for _, typ := range types {
		for _, cache := range []struct {
			name string
			size int
		}{{"cache", redislimit.DefaultDenyCacheSize}, {"nocache", 0}} {
			t.Run(typ.name+"/"+cache.name, func(t *testing.T) {
				runSuite(t, c, typ.new, redislimit.WithDenyCacheSize(cache.size))
			})
		}
	}
}
