package redislimit

import "github.com/keylimit/keylimit"

// The in-process limiters that FailLocal falls back to, one per window type.
//
// TODO(windows): keylimit.FixedWindow and keylimit.SlidingWindow are being
// written (issue 3); until they land, both windows fall back to a token
// bucket of the same rate with a burst of Events.
func newFixedFallback(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewTokenBucket[string](l, opts...)
}

func newSlidingFallback(l keylimit.Limit, opts ...keylimit.Option) (keylimit.Limiter[string], error) {
	return keylimit.NewTokenBucket[string](l, opts...)
}
