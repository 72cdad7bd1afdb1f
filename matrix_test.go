package keylimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
)

// TestMatrix runs the composition matrix (limitertest.RunMatrix) on the
// in-memory limiters, on one mock clock; the Redis stores run it in
// redislimit's TestMatrix.
func TestMatrix(t *testing.T) {
	mock := clock.NewMock()
	on := keylimit.WithClock(mock)
	limitertest.RunMatrix(t, limitertest.Harness{
		Name:    "memory",
		Now:     mock.Now,
		Advance: mock.Add,
		Limiter: func(t *testing.T, kind string, l keylimit.Limit, perKey func(string) keylimit.Limit) (keylimit.Limiter[string], error) {
			var lim interface {
				keylimit.Limiter[string]
				SetKeyLimit(func(string) keylimit.Limit) error
			}
			var err error
			switch kind {
			case "bucket":
				lim, err = keylimit.NewTokenBucket[string](l, on)
			case "fixed":
				lim, err = keylimit.NewFixedWindow[string](l, on)
			default:
				lim, err = keylimit.NewSlidingWindow[string](l, on)
			}
			if err == nil && perKey != nil {
				err = lim.SetKeyLimit(perKey)
			}
			return lim, err
		},
		Penalty: func(t *testing.T, inner keylimit.Limiter[string], b keylimit.Ban) (keylimit.Limiter[string], error) {
			return keylimit.NewPenalty(inner, b, on)
		},
		Concurrency: func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error) {
			return keylimit.NewConcurrency[string](n, on, keylimit.WithMaxHold(maxHold))
		},
	})
}
