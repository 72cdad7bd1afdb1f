package redislimit

import (
	"fmt"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// newFallbackFunc builds the in-process limiter that FailLocal decides
// with: a keylimit constructor of the same algorithm.
type newFallbackFunc func(keylimit.Limit, ...keylimit.Option) (fallbackLimiter, error)

// fallbackLimiter is what FailLocal needs of its in-process limiter: every
// keylimit rate limiter on string keys is one.
type fallbackLimiter interface {
	keylimit.Limiter[string]
	SetKeyLimit(func(key string) keylimit.Limit) error
}

// fallbackFor returns the limiter that decides while Redis fails under p,
// FailLocal's (nil under the other policies): made by newLim, of p's share
// of l, on c (nil: the system's clock). SetKeyLimit gives it each key's
// share of the keys' own limits (guard.keyLimitChanged).
func fallbackFor(p FailurePolicy, l keylimit.Limit, c clock.Clock, newLim newFallbackFunc) (fallbackLimiter, error) {
	if !p.local() {
		return nil, nil
	}
	var opts []keylimit.Option
	if c != nil {
		opts = append(opts, keylimit.WithClock(c))
	}
	fb, err := newLim(p.share(l, p.instances), opts...)
	if err != nil {
		return nil, fmt.Errorf("redislimit: the FailLocal fallback limiter: %w", err)
	}
	return fb, nil
}

// The in-process limiters that FailLocal falls back to for the windows: the
// same algorithm in memory where keylimit's type takes the limit, else the
// nearest one that does. The in-memory windows bound their quotas (a
// SlidingWindow keeps 8 bytes per event per key, up to
// keylimit.MaxSlidingWindowEvents; the packed counters of a FixedWindow and
// a SlidingCounter hold so many events per period), where Redis does not;
// for the time Redis is away, an estimate of the same limit serves.

func newFixedFallback(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
	return firstOf(l, opts,
		func(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
			return keylimit.NewFixedWindow[string](l, opts...)
		})
}

func newSlidingFallback(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
	return firstOf(l, opts,
		func(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
			return keylimit.NewSlidingWindow[string](l, opts...)
		},
		func(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
			return keylimit.NewSlidingCounter[string](l, opts...)
		})
}

// firstOf returns the first of news that takes l; if none does, a
// TokenBucket of the same rate with a burst of Events, which takes every
// limit a Redis window does.
func firstOf(l keylimit.Limit, opts []keylimit.Option, news ...newFallbackFunc) (fallbackLimiter, error) {
	for _, n := range news {
		if lim, err := n(l, opts...); err == nil {
			return lim, nil
		}
	}
	return keylimit.NewTokenBucket[string](l, opts...)
}
