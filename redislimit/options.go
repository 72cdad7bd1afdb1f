package redislimit

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
)

// Option configures a Redis limiter: it is keylimit.Option, so that
// keylimit's keylimit.WithClock, keylimit.WithLogger and keylimit.WithMaxHold configure a Redis
// limiter too, beside this package's options. Options are passed to the
// constructors (NewTokenBucket, NewFixedWindow, NewSlidingWindow,
// NewConcurrency, NewPenalty); an invalid one makes the constructor return
// an error, and so does one of this package's given to a keylimit
// limiter, or keylimit's WithEvictionInterval, WithMaxKeys,
// WithAdmitUntracked or WithStats given to a Redis one. A duration longer
// than 2^60 ns (about 36 years) counts as that long, so that no time
// computed from it wraps.
//
// keylimit.WithClock makes the limiter read local time from its clock
// instead of the system's monotonic clock. Decisions are made on Redis
// server time; local time serves the deny cache (how long a refusal
// lasts), the failure backoff, the FailLocal fallback limiter, the sleeps
// of Wait and WaitN, and leases (WithLeases: their end, the wait after a
// short fetch, the sweeper's timers). A lease, a refusal remembered and a
// Penalty's ban also end on the system's monotonic clock, so that a clock
// that stops or steps back cannot stretch them past the time Redis
// counted. Tests pass clock.NewMock() to step it by hand.
//
// keylimit.WithLogger sets the logger of the events operators must know
// of, each logged once, never per request: at construction, what the
// failure policy admits; the start (Warn) and end (Info) of a Redis
// outage; an eviction policy that can reset limits (Warn, see Ping). The
// default is slog.Default(), as it is when a line is logged. Lines say
// "redislimit:" and carry the limiter's name.
//
// keylimit.WithMaxHold makes a Concurrency take back slots held longer
// than its d: the hold is not renewed past d after its acquisition, and
// expires then on Redis time, whether its instance lives or not, so a
// holder that never releases cannot wedge its key. The slots come back to
// every instance's next call on the key, and that call counts them in its
// Stats.Reclaimed; the Release of their Permit afterwards frees nothing.
// Without it, a hold is renewed until its Release. d is at least a
// millisecond; a hold expiry longer than d is d. The rate limiters refuse
// it.
type Option = keylimit.Option

// optionFunc is the Option of this package that applies f.
func optionFunc(f func(*options)) Option { return compose.NewOption(f).(keylimit.Option) }

// options is what Option values set, before a constructor reads them.
type options struct {
	name      string  // the constructor's name argument, checked
	prefix    *string // nil: the default, derived from the name, the algorithm and the limit
	timeout   time.Duration
	policy    FailurePolicy
	policySet bool         // WithFailurePolicy was given
	fleet     int          // WithFleetSize; 0: not given
	beats     bool         // the default policy announces the instance on Redis (fleetBeats, withFleetBeats)
	logger    *slog.Logger // WithLogger; nil: slog.Default()
	onError   func(error)
	clock     clock.Clock // nil: the system's monotonic clock
	denySize  int
	backoff   time.Duration
	leaseTime time.Duration // WithLeases; 0: no leases
	// holdExpiry and maxHold are WithHoldExpiry's and keylimit.WithMaxHold's, which
	// only a Concurrency takes; 0: not given.
	holdExpiry, maxHold time.Duration
	// scriptClock is withScriptClock's, which only the package's tests
	// set; nil: the scripts decide on Redis server time.
	scriptClock *scriptClock
	err         error // the first invalid option, reported by the constructor
}

// The defaults of the options.
const (
	// DefaultTimeout is how long a decision may wait for Redis unless
	// WithTimeout says otherwise.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultDenyCacheSize is how many refused keys an instance remembers
	// unless WithDenyCacheSize says otherwise.
	DefaultDenyCacheSize = 100_000
	// DefaultFailureBackoff is the longest a limiter decides without Redis
	// after Redis failed (after three failures in a row; 62.5 ms after
	// one), unless WithFailureBackoff says otherwise.
	DefaultFailureBackoff = time.Second
)

func (o *options) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// buildOptions checks the constructor's name and applies opts.
func buildOptions(name string, opts []Option) (options, error) {
	o := options{name: name, timeout: DefaultTimeout, policy: defaultPolicy(), denySize: DefaultDenyCacheSize,
		backoff: DefaultFailureBackoff, beats: fleetBeats}
	if err := checkName(name); err != nil {
		return o, err
	}
	exts, own, err := compose.SplitOptions(opts)
	if err != nil {
		return o, err
	}
	o.clock, o.logger = own.Clock, own.Logger
	if own.MaxHold > 0 {
		if own.MaxHold < time.Millisecond {
			return o, fmt.Errorf("redislimit: longest hold %v is below a millisecond", own.MaxHold)
		}
		o.maxHold = min(own.MaxHold, time.Duration(maxSpan))
	}
	for _, ext := range exts {
		ext.(func(*options))(&o)
	}
	if !o.policySet && o.fleet > 0 {
		o.policy = FailLocal(o.fleet)
	}
	if !o.policy.live {
		o.beats = false
	}
	return o, o.err
}

// maxNameLen bounds a limiter's name, which every Redis key it writes holds.
const maxNameLen = 100

// checkName refuses a name that is empty, long, or holds anything but
// letters, digits and - _ . : /: no spaces or control characters, which
// keys and logs would carry, and no braces, which Redis Cluster reads as a
// hash tag that would put every key of the limiter on one node.
func checkName(name string) error {
	if name == "" {
		return errors.New(`redislimit: the limiter's name is empty; name it for its purpose, such as "login"`)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("redislimit: the limiter's name is %d bytes long, more than %d", len(name), maxNameLen)
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("-_.:/", c)) {
			return fmt.Errorf("redislimit: the limiter's name %q holds %q; use letters, digits and - _ . : /", name, c)
		}
	}
	return nil
}

// keyPrefix returns the prefix of the Redis keys of a limiter of algorithm
// alg (its quota q) under limit l: WithPrefix's, or the default, which holds
// the name, the algorithm and the limit (see WithPrefix).
func (o *options) keyPrefix(alg string, l keylimit.Limit, q int) string {
	if o.prefix != nil {
		return *o.prefix
	}
	if l.Calendar != 0 {
		// The period, not the zone: a key whose zone changes keeps its
		// state (see lua/calendar.lua).
		return fmt.Sprintf("keylimit:%s:%s:%d/%v/%d:", o.name, alg, l.Events, l.Calendar, q)
	}
	return fmt.Sprintf("keylimit:%s:%s:%d/%v/%d:", o.name, alg, l.Events, l.Period, q)
}

// WithPrefix sets the prefix of every Redis key the limiter writes: the state
// of key k lives at prefix{k} (StateKey returns it). Limiters (on any instance) that share a prefix
// share their keys' state.
//
// The default holds the limiter's name, its algorithm and its limit, such as
// "keylimit:login:bucket:5/1m0s/5:". So limiters with different names never
// share state, nor do limiters of one name with different algorithms or
// limits (two limits combined with keylimit.All, say), and instances
// configured alike always do. A change of the limit therefore starts every
// key afresh, once (see the README for a rolling deploy); a prefix of your
// own keeps the keys' state across a change, read under the new limit.
//
// SetLimit keeps the prefix, and the keys' state. On Redis Cluster, k is
// the hash tag; a prefix that contains '{' takes it over (see the package
// doc, "Keys, and Redis Cluster").
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
// out: FailOpen, FailClosed or FailLocal. The default is FailLocal of the
// fleet's size: WithFleetSize's, or without it the live fleet's, which the
// limiter learns on Redis while it answers (see WithFleetSize), so that a
// fleet admits about the limit while Redis fails.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(o *options) {
		o.policySet = true
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

// WithFleetSize says that n instances share the limit. Without
// WithFailurePolicy, the failure policy is then FailLocal(n): while Redis
// fails, each instance decides alone on 1/n of the limit, so the fleet
// admits about the limit, not n times it. Give the most instances the fleet
// runs (autoscaled between a and b, b): fewer then admit less, never more.
// The limiter logs at construction what its policy admits across the fleet.
//
// Without WithFleetSize (and WithFailurePolicy), the fleet's size is
// learned: after a call Redis answered, at most every 2 s, the limiter
// announces itself in a sorted set beside its keys (its prefix + "#fleet",
// each instance's entry expiring 10 s after its last announcement on Redis
// time), and reads how many instances are announced; while Redis fails,
// each instance decides alone on 1/N of the limit, N the count it read at
// the last answer (1, the whole limit, until the first). So a fleet admits
// about the limit while Redis fails, an instance cut off longer counts with
// its last N, and a fleet that grew within the last 2 s admits a little
// more (see the package doc, "Failure policies"). Close withdraws the
// instance at once. WithFleetSize fixes N, and makes no announcements.
func WithFleetSize(n int) Option {
	return optionFunc(func(o *options) {
		if n < 1 {
			o.fail(fmt.Errorf("redislimit: WithFleetSize(%d): the fleet size is below 1", n))
			return
		}
		o.fleet = n
	})
}

// WithOnError makes the limiter call f with every error Redis gives it (a
// timeout, a refused connection, a script error), each wrapped in a
// *Error that names the operation and the key (errors.Is(err, ErrScript)
// tells a script error). f is called on the goroutine of the decision,
// before the failure policy answers; it must be
// safe for concurrent use and should be quick (count, log with sampling).
// Without it, errors are seen only by the methods that return them
// (TakeContext, PeekContext, RefundContext), and counted in Stats.Errors.
func WithOnError(f func(err error)) Option {
	return optionFunc(func(o *options) { o.onError = f })
}

// WithDenyCacheSize sets how many refused keys the limiter remembers in
// process (default DefaultDenyCacheSize); 0 turns the deny cache off. Each
// costs about 150 bytes whatever the key's length (it is kept as two seeded
// 64-bit hashes, not as a string), so the default holds at most about 15 MB.
//
// Once Redis refuses a key with RetryAfter d, the limiter refuses the same
// request (or a larger one) for that key for d without asking Redis again.
// It never admits anything Redis would refuse; the only difference it can
// make is to refuse a key that a Reset or Refund on another instance freed,
// until d has passed. A full cache forgets its oldest refusal for each new
// one.
func WithDenyCacheSize(n int) Option {
	return optionFunc(func(o *options) {
		if n < 0 {
			o.fail(fmt.Errorf("redislimit: deny cache size %d is negative", n))
			return
		}
		o.denySize = n
	})
}

// WithFailureBackoff sets the longest the limiter answers by its failure
// policy without asking Redis after Redis fails (default
// DefaultFailureBackoff); 0 asks Redis on every call. The first failure
// after Redis answered is followed by a sixteenth of it, the second in a
// row by a quarter, the third and later by all of it: a lone timeout costs
// little, an outage a timeout per backoff. A dead Redis costs a call its
// whole timeout: with a backoff, one call per backoff pays it, and the
// others are answered at once, with an error that wraps ErrUnavailable.
// Error replies (Redis up, the command refused) and calls whose own context
// ended do not start the backoff; Reset asks Redis even during it. A
// backoff longer than 2^60 ns (about 36 years) is that long.
func WithFailureBackoff(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d < 0 {
			o.fail(fmt.Errorf("redislimit: failure backoff %v is negative", d))
			return
		}
		o.backoff = d
	})
}

// WithLeases makes a TokenBucket or FixedWindow take a hot key's events from
// Redis in leases of d: one script call takes what this instance spent on
// the key in about d, at most a tenth of its quota, and the instance admits
// them in process, without a round trip, for d at most (a bucket's lease,
// at most half of Burst × Interval; a window's, to the window's end); what
// is left then goes back to Redis. A key asked less often than about once
// per d leases nothing and is decided as without leases. The fleet never
// admits more than the limit; the cost is events held idle, at most one
// lease per key and instance, which other instances cannot use meanwhile,
// and Results that count only this instance's lease (see the package doc,
// "Leases"). Choose d short: tens of milliseconds. A limiter with leases
// should be closed: Close gives back what its leases hold. It is an error
// for d <= 0, and on a SlidingWindow.
func WithLeases(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d <= 0 {
			o.fail(fmt.Errorf("redislimit: WithLeases(%v): the lease time is not positive", d))
			return
		}
		o.leaseTime = d
	})
}

// withFleetBeats makes the limiter announce itself on Redis under the
// default policy (on) or not: the package's tests, which turn announcements
// off for all limiters (fleetBeats), turn them on for those that test them.
func withFleetBeats(on bool) Option { return optionFunc(func(o *options) { o.beats = on }) }

// withScriptClock makes the scripts decide on c's time instead of Redis
// server time. Only the package's tests set it: Redis's own clock cannot be
// moved, and the behaviour suite steps a clock back and forth.
func withScriptClock(c clock.Clock) Option {
	return optionFunc(func(o *options) { o.scriptClock = &scriptClock{c: c} })
}

// DefaultHoldExpiry is how long a hold lives in Redis without a renewal,
// unless WithHoldExpiry says otherwise.
const DefaultHoldExpiry = 30 * time.Second

// WithHoldExpiry sets how long a Concurrency's hold lives in Redis without
// a renewal (default DefaultHoldExpiry): the instance renews each hold it
// has not released every d/2, and the slots of an instance that dies come
// back within d. A shorter d returns a dead instance's slots sooner, and
// costs a renewal call per hold per d/2; a pause of an instance longer than
// d/2 may lose its holds. d is at least a millisecond. The rate limiters
// refuse it.
func WithHoldExpiry(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d < time.Millisecond {
			o.fail(fmt.Errorf("redislimit: hold expiry %v is below a millisecond", d))
			return
		}
		o.holdExpiry = min(d, time.Duration(maxSpan))
	})
}
