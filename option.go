package keylimit

import (
	"errors"
	"log/slog"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/compose"
)

// Option configures a limiter. Options are passed to the constructors
// (NewTokenBucket, NewFixedWindow, ...); an invalid one makes the constructor
// return an error. The zero Option changes nothing.
type Option struct {
	apply func(*options)
	// ext is an option of redislimit's (see internal/compose.NewOption),
	// which this package's limiters refuse.
	ext any
}

// optionFunc is the Option that applies f.
func optionFunc(f func(*options)) Option { return Option{apply: f} }

// options is what Option values set, before a constructor reads them.
type options struct {
	clock      clock.Clock   // nil: the system's monotonic clock
	evictEvery time.Duration // with evictSet: the sweep interval, 0 for none
	evictSet   bool
	maxKeys    int // 0: no cap
	overflow   overflowPolicy
	stats      bool // WithStats
	logger     *slog.Logger
	err        error // the first invalid option, reported by the constructor

	maxHold time.Duration // WithMaxHold: a Concurrency's only
}

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// buildOptions is a rate limiter's options: every option but WithMaxHold.
func buildOptions(opts []Option) (options, error) {
	o := applyOptions(opts)
	if o.maxHold != 0 {
		o.fail(errors.New("keylimit: WithMaxHold is an option of a Concurrency: a rate limiter holds nothing"))
	}
	return o, o.err
}

// applyOptions applies opts; o.err holds the first invalid one's error.
func applyOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt.ext != nil {
			o.fail(errors.New("keylimit: an option of redislimit is not an option of an in-memory limiter"))
		}
		if opt.apply != nil {
			opt.apply(&o)
		}
	}
	return o
}

// redislimit's limiters take keylimit's Option: their own options, made by
// NewOption, and WithClock, WithLogger and WithMaxHold, which SplitOptions
// reads for them.
func init() {
	compose.NewOption = func(ext any) any { return Option{ext: ext} }
	compose.SplitOptions = func(opts any) ([]any, compose.Shared, error) {
		var exts []any
		var own []Option
		for _, opt := range opts.([]Option) {
			if opt.ext != nil {
				exts = append(exts, opt.ext)
			} else {
				own = append(own, opt)
			}
		}
		o := applyOptions(own)
		if o.err == nil && (o.evictSet || o.maxKeys != 0 || o.overflow != 0 || o.stats) {
			o.err = errors.New("keylimit: WithEvictionInterval, WithMaxKeys, WithAdmitUntracked and WithStats are not options of a Redis limiter: its keys live on Redis")
		}
		return exts, compose.Shared{Clock: o.clock, Logger: o.logger, MaxHold: o.maxHold}, o.err
	}
}

// WithLogger makes the limiter log through l what an operator must know,
// once per event and never per request: today, that its key cap
// (WithMaxKeys) has begun to leave new keys untracked, and that it has room
// again; at most one such start a minute (of the limiter's clock), the next
// counting those left out; and for a Concurrency, that slots held past its
// longest hold (WithMaxHold) were taken back, the first time and then at
// most once a minute, with the slots taken back since the line before.
// Without it, the limiter logs through slog.Default(), as it is when the
// line is written.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l == nil {
			o.fail(errors.New("keylimit: WithLogger(nil): leave the option out for slog.Default()"))
			return
		}
		o.logger = l
	})
}
