package redislimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
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

// runSuite runs the behaviour suite on limiters that newLim makes on c, on a
// clock of the test's (see TestBehaviour), with opts.
func runSuite(t *testing.T, c redis.UniversalClient, newLim newFunc, opts ...redislimit.Option) {
	mock := newMock()
	limitertest.Run(t, limitertest.Harness{
		New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
			return newLim(c, l, append(opts, redislimit.WithTimeout(patient),
				redislimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
		},
		Advance:  mock.Add,
		Attempts: 2_000,
	})
}

// newMock returns a mock clock at the start of 2025 (UTC), a time on every
// boundary the tests use (a minute, an hour), for the limiters' local time
// and, with WithScriptClock, the scripts' time.
func newMock() *clock.Mock {
	mock := clock.NewMock()
	mock.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	return mock
}
