package keylimit

import (
	"errors"
	"log/slog"
	"time"

	"github.com/benbjohnson/clock"
)

// Option configures a limiter. Options are passed to the constructors
// (NewTokenBucket, NewFixedWindow, ...); an invalid one makes the constructor
// return an error.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// options is what Option values set, before a constructor reads them.
type options struct {
	clock      clock.Clock   // nil: the system's monotonic clock
	evictEvery time.Duration // with evictSet: the sweep interval, 0 for none
	evictSet   bool
	maxKeys    int // 0: no cap
	overflow   overflowPolicy
	keyLimit   any  // WithKeyLimit's func(K) Limit
	stats      bool // WithStats
	logger     *slog.Logger
	err        error // the first invalid option, reported by the constructor
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func buildOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		opt.apply(&o)
	}
	return o, o.err
}

// WithLogger makes the limiter log through l what an operator must know,
// once per event and never per request: today, that its key cap
// (WithMaxKeys) has begun to leave new keys untracked, and that it has room
// again; at most one such start a minute (of the limiter's clock), the next
// counting those left out. Without it, the limiter logs through
// slog.Default(), as it is when the line is written.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l == nil {
			o.fail(errors.New("keylimit: WithLogger(nil): leave the option out for slog.Default()"))
			return
		}
		o.logger = l
	})
}
