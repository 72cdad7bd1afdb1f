package redislimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// ops is what a limiter keeps for its operators: its counts (stats.go), the
// outages it logs (below) and the checks of the server (health.go).
type ops struct {
	counts counts
	// logger is WithLogger's; nil means slog.Default() as it is when a line
	// is logged, so that a slog.SetDefault after construction is followed.
	logger *slog.Logger
	// fleet is WithFleetSize's; 0 when not given.
	fleet int

	// failing is set by the failure that starts an outage and cleared by the
	// success that ends it; read by every round trip, written only then.
	failing atomic.Bool
	mu      sync.Mutex // protects the fields below, and the changes of failing
	since   int64      // local ns at which the outage under way began
	before  uint64     // counts.fallbacks() then
	logged  bool       // whether its start was logged, and so its end will be
	// lastLogged is the local ns of the last outage start logged, if any
	// was (anyLogged); unlogged the outages started since that were not,
	// within quietPeriod of it.
	lastLogged int64
	anyLogged  bool
	unlogged   int

	// policy is where the check of the eviction policy stands: unchecked,
	// checking, or checked (health.go). warned and refused make its log
	// lines once-only, whoever runs the check.
	policy          atomic.Int32
	warned, refused atomic.Bool
}

func (o *ops) init(opts options) {
	o.counts.init()
	o.logger, o.fleet = opts.logger, opts.fleet
}

// quietPeriod is the least time between two outage starts logged: a Redis
// that fails and recovers again and again (a flapping link, an OOM that
// refuses only writes) is logged once per period, with a count of the rest.
const quietPeriod = int64(time.Minute)

// logger returns the logger lines go to.
func (l *limiter) logger() *slog.Logger {
	if l.ops.logger != nil {
		return l.ops.logger
	}
	return slog.Default()
}

// called counts a round trip made at local time now that returned err, and
// follows Redis's health: a failure starts the backoff (trip) and, unless it
// was the caller's or one key's, an outage; a success ends the outage, and
// the first one starts the check of the eviction policy.
func (l *limiter) called(ctx context.Context, err error, now int64) {
	l.ops.counts.calls.Add(1)
	if err == nil {
		if l.ops.failing.Load() {
			l.outageEnded(now)
		}
		if l.ops.policy.Load() == policyUnchecked {
			l.checkPolicySoon()
		}
		return
	}
	l.ops.counts.errors.Add(1)
	l.trip(ctx, err, now)
	if !l.ops.failing.Load() && isOutage(ctx, err) {
		l.outageStarted(err, now)
	}
}

// isOutage reports whether err, a failure of a call under the caller's ctx,
// says Redis cannot decide: not when the caller's own context ended, nor
// for a WRONGTYPE reply (one key holds another type's value), which other
// keys do not share.
func isOutage(ctx context.Context, err error) bool {
	var reply redis.Error
	if ctx.Err() != nil || errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE") {
		return false
	}
	return true
}

// outageStarted starts an outage at local time now, after err, and logs it unless
// another was logged less than quietPeriod before.
func (l *limiter) outageStarted(err error, now int64) {
	o := &l.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.CompareAndSwap(false, true) {
		return
	}
	o.since, o.before = now, o.counts.fallbacks()
	o.logged = !o.anyLogged || now-o.lastLogged >= quietPeriod
	if !o.logged {
		o.unlogged++
		return
	}
	attrs := []any{"limiter", l.name, "error", err.Error(), "policy", l.policy.String(), "admits", l.admits()}
	if o.unlogged > 0 {
		attrs = append(attrs, "outages_not_logged", o.unlogged)
	}
	l.logger().Warn("redislimit: Redis failed; the failure policy decides until Redis answers again", attrs...)
	o.lastLogged, o.anyLogged, o.unlogged = now, true, 0
}

// outageEnded ends the outage under way at local time now, and logs its end
// if its start was logged.
func (l *limiter) outageEnded(now int64) {
	o := &l.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.CompareAndSwap(true, false) || !o.logged {
		return
	}
	l.logger().Info("redislimit: Redis answers again; decisions are exact again", "limiter", l.name,
		"outage", time.Duration(now-o.since), "fallbacks", o.counts.fallbacks()-o.before)
}

// announce logs, once at construction, what the failure policy will admit:
// at Info when neither the policy nor the fleet size was chosen (the default
// lets a fleet of N admit N times the limit), at Warn when they disagree
// (FailLocal(k) in a fleet of more than k), at Debug otherwise.
func (l *limiter) announce(chosen bool) {
	level := slog.LevelDebug
	switch {
	case !chosen:
		level = slog.LevelInfo
	case l.policy.kind == failLocal && l.ops.fleet > l.policy.instances:
		level = slog.LevelWarn
	}
	lg := l.logger()
	if !lg.Enabled(context.Background(), level) {
		return
	}
	attrs := []any{"limiter", l.name, "prefix", l.prefix, "limit", l.Limit().String(),
		"policy", l.policy.String(), "admits", l.admits()}
	if !chosen {
		attrs = append(attrs, "hint", "WithFleetSize(N) gives each of N instances 1/N of the limit while Redis fails")
	}
	lg.Log(context.Background(), level, "redislimit: limiter ready; while Redis fails, its failure policy decides", attrs...)
}

// admits says what the failure policy admits while Redis fails, for one
// instance and for the fleet (of WithFleetSize's size, or of N).
func (l *limiter) admits() string {
	switch l.policy.kind {
	case failOpen:
		return "every request: no limit while Redis fails"
	case failClosed:
		return "nothing: every request is refused while Redis fails"
	}
	share := l.policy.share(l.Limit())
	n := l.ops.fleet
	if n == 0 {
		return fmt.Sprintf("each instance decides alone on %v, so a fleet of N instances admits up to N × %v", share, share)
	}
	return fmt.Sprintf("each instance decides alone on %v, so a fleet of %d admits up to %v (the limit is %v)",
		share, n, times(share, n), l.Limit())
}

// times returns l with its events and burst multiplied by n: what n
// instances deciding alone on l admit between them.
func times(l keylimit.Limit, n int) keylimit.Limit {
	m := keylimit.Per(l.Events*n, l.Period)
	if b := l.BurstSize(); b != l.Events {
		m = m.WithBurst(b * n)
	}
	return m
}
