package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
)

// TestBehaviour runs the shared behaviour suite against every in-memory
// limiter type, on a mock clock.
func TestBehaviour(t *testing.T) {
	types := []struct {
		name string
		new  func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error)
		// approximate: the limiter estimates (see limitertest.Harness).
		approximate bool
	}{
		{"TokenBucket", func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](l, opts...)
		}, false},
		{"FixedWindow", func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewFixedWindow[string](l, opts...)
		}, false},
		{"SlidingWindow", func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingWindow[string](l, opts...)
		}, false},
		{"SlidingCounter", func(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingCounter[string](l, opts...)
		}, true},
	}
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			var mock *clock.Mock
			limitertest.Run(t, limitertest.Harness{
				New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
					mock = clock.NewMock()
					return typ.new(l, keylimit.WithClock(mock))
				},
				Advance:     func(d time.Duration) { mock.Add(d) },
				Approximate: typ.approximate,
			})
		})
	}
}
