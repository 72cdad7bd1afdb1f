package redislimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
)

// Option configures a Redis limiter. Options are passed to the constructors
// (NewTokenBucket, NewFixedWindow, NewSlidingWindow); an invalid one makes
// the constructor return an error.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// options is what Option values set, before a constructor reads them.
type options struct {
	prefix    *string // nil: the default, derived from the algorithm and the limit
	timeout   time.Duration
	policy    FailurePolicy
	onError   func(error)
	clock     clock.Clock // nil: the system's monotonic clock
	denyCache int
	backoff   time.Duration
	err       error // the first invalid option, reported by the constructor
}

// The defaults of the options.
const (
	// DefaultTimeout is how long a decision may wait for Redis unless
	// WithTimeout says otherwise.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultDenyCacheSize is how many refused keys an instance remembers
	// unless WithDenyCacheSize says otherwise.
	DefaultDenyCacheSize = 100_000
	// DefaultFailureBackoff is how long a limiter decides without Redis
	// after Redis failed, unless WithFailureBackoff says otherwise.
	DefaultFailureBackoff = time.Second
)

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func buildOptions(opts []Option) (options, error) {
	o := options{timeout: DefaultTimeout, policy: FailLocal(1), denyCache: DefaultDenyCacheSize, backoff: DefaultFailureBackoff}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o, o.err
}

// WithPrefix sets the prefix of every Redis key the limiter writes: the state
// of key k lives at prefix+k. Limiters (on any instance) that share a prefix
// share their keys' state, so give each limit its own prefix, e.g.
// "ratelimit:login:".
//
// The default is derived from the algorithm and the limit, such as
// "keylimit:bucket:10/1m0s:", so that two limiters with different limits
// never share state by accident, and instances configured alike always do.
// Set a prefix of your own to keep the state across a change of the limit.
//
// In Redis Cluster a decision touches one key, so any prefix works; put a
// hash tag in the keys ("{tenant}:...") only to place them yourself.
func WithPrefix(prefix string) Option {
	return optionFunc(func(o *options) { o.prefix = &prefix })
}

// WithTimeout bounds how long one decision may wait for Redis, round trip,
// retries and reconnection included (default DefaultTimeout). When it
// passes, the decision is the failure policy's, and the failure backoff
// starts. The methods that take a context use the earlier of its deadline
// and this one.
//
// The bound holds only if the client honours context deadlines (its Options
// have ContextTimeoutEnabled set; the constructors refuse a client known not
// to). A client dials its connections on first use, so the first decisions
// of a process spend the timeout on the dial too (MinIdleConns dials ahead).
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("redislimit: timeout %v is not positive", d))
			return
		}
		o.timeout = d
	})
}

// WithFailurePolicy sets what the limiter answers while Redis fails or times
// out (default FailLocal(1)).
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(o *options) {
		if p.kind == 0 {
			o.fail(errors.New("redislimit: WithFailurePolicy: the zero FailurePolicy; use FailOpen, FailClosed or FailLocal"))
			return
		}
		if p.err != nil {
			o.fail(p.err)
			return
		}
		o.policy = p
	})
}

// WithOnError makes the limiter call f with every error Redis gives it (a
// timeout, a refused connection, a script error), each wrapped in a
// *Error that names the operation and the key. f is called on the
// goroutine of the decision, before the failure policy answers; it must be
// safe for concurrent use and should be quick (count, log with sampling).
// Without it, errors are seen only by the methods that return them
// (TakeContext, PeekContext, ResetContext, RefundContext).
func WithOnError(f func(err error)) Option {
	return optionFunc(func(o *options) { o.onError = f })
}

// WithClock makes the limiter read local time from c instead of the
// system's monotonic clock. Decisions are made on Redis server time; local
// time serves only the deny cache (how long a refusal lasts), the failure
// backoff, the FailLocal fallback limiter and the sleeps of Wait and WaitN.
// Tests pass clock.NewMock() to step it by hand.
func WithClock(c clock.Clock) Option {
	return optionFunc(func(o *options) {
		if c == nil {
			o.fail(errors.New("redislimit: WithClock(nil): pass clock.New() for real time"))
			return
		}
		o.clock = c
	})
}

// WithDenyCacheSize sets how many refused keys the limiter remembers in
// process (default DefaultDenyCacheSize); 0 turns the deny cache off.
//
// Once Redis refuses a key with RetryAfter d, the limiter refuses the same
// request (or a larger one) for that key for d without asking Redis again.
// It never admits anything Redis would refuse; the only difference it can
// make is to refuse a key that a Reset or Refund on another instance freed,
// until d has passed. When the cache is full, expired entries are swept;
// while it is full of live ones, further refused keys go to Redis.
func WithDenyCacheSize(n int) Option {
	return optionFunc(func(o *options) {
		if n < 0 {
			o.fail(fmt.Errorf("redislimit: deny cache size %d is negative", n))
			return
		}
		o.denyCache = n
	})
}

// WithFailureBackoff sets how long, after Redis fails, the limiter answers
// by its failure policy without asking Redis (default
// DefaultFailureBackoff); 0 asks Redis on every call. A dead Redis costs a
// call its whole timeout: with a backoff, one call per backoff pays it, and
// the others are answered at once, with an error that wraps ErrUnavailable.
// Error replies (Redis up, the command refused) and calls whose own context
// ended do not start the backoff; Reset asks Redis even during it.
func WithFailureBackoff(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d < 0 {
			o.fail(fmt.Errorf("redislimit: failure backoff %v is negative", d))
			return
		}
		o.backoff = d
	})
}
