package redislimit

import "github.com/benbjohnson/clock"

// WithScriptClock makes the scripts decide on c's time instead of Redis
// server time, for the tests that step a clock (the behaviour suite). It
// exists only in the package's tests.
func WithScriptClock(c clock.Clock) Option { return withScriptClock(c) }
