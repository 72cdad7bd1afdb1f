package redislimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// ops is what a limiter keeps for its operators, the observer of its
// decisions: its counts (stats.go), the outages it logs (below) and the
// checks of the server (health.go). The layers of the decision path tell
// it what happened (a verdict, a round trip's outcome); it changes no
// decision.
type ops struct {
	counts counts
	name   string // the limiter's
	// logger is keylimit.WithLogger's; nil means slog.Default() as it is when a line
	// is logged, so that a slog.SetDefault after construction is followed.
	logger *slog.Logger
	// fleet is WithFleetSize's; 0 when not given.
	fleet int
	// policy and limit say, in the lines logged, what the failure policy
	// admits: limit returns the limiter's limit at the time.
	policy FailurePolicy
	limit  func() keylimit.Limit
	// perKey: the keys are under limits of their own (SetKeyLimit with a
	// function).
	perKey atomic.Bool
	// describe, if set, says what the policy admits instead (a
	// Concurrency's limit is no keylimit.Limit); limit is then unused.
	describe func() string

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
	// The same for the script errors (scriptFailed): when the last was
	// logged, and how many were not since.
	lastScript     int64
	anyScript      bool
	scriptUnlogged int

	// The checks of the server (health.go): client is the limiter's,
	// timeout its bound on a call; evict is where the checks of the
	// eviction policy and of persistence stand (unchecked, checking, or
	// checked); warned, warnedDisk and refused make their log lines
	// once-only, whoever runs the check.
	client                      redis.UniversalClient
	timeout                     time.Duration
	evict                       atomic.Int32
	warned, warnedDisk, refused atomic.Bool
	// take is the plain script of the limiter's algorithm, which Ping
	// loads beside the full one; nil if it has none.
	take *redis.Script

	// The background check (checkPolicySoon): checking counts it while
	// it runs; closed, set by close under checkMu, starts no more;
	// stopCheck cancels one under way.
	checkMu   sync.Mutex
	checking  sync.WaitGroup
	closed    bool
	stopCheck context.CancelFunc
}

// init sets up o, in place (it holds atomics), for the limiter named name
// on client, whose calls wait at most timeout, whose failure policy is
// policy and whose limit limit returns; logger and fleet are keylimit.WithLogger's
// and WithFleetSize's.
func (o *ops) init(name string, client redis.UniversalClient, timeout time.Duration, logger *slog.Logger, fleet int,
	policy FailurePolicy, limit func() keylimit.Limit) {
	o.counts.init()
	o.name, o.client, o.timeout = name, client, timeout
	o.logger, o.fleet = logger, fleet
	o.policy, o.limit = policy, limit
}

// quietPeriod is the least time between two outage starts logged: a Redis
// that fails and recovers again and again (a flapping link, an OOM that
// refuses only writes) is logged once per period, with a count of the rest.
const quietPeriod = int64(time.Minute)

// log returns the logger lines go to.
func (o *ops) log() *slog.Logger {
	if o.logger != nil {
		return o.logger
	}
	return slog.Default()
}

// admits says what the failure policy admits while Redis fails, under the
// limiter's limit now.
func (o *ops) admits() string {
	if o.describe != nil {
		return o.describe()
	}
	return o.policy.admits(o.limit(), o.fleet, o.perKey.Load())
}

// limitText is the limit the keys are under, for the lines logged: the
// limiter's, or each key's own and the limiter's for the others.
func (o *ops) limitText() string {
	if o.perKey.Load() {
		return "each key's (SetKeyLimit), else " + o.limit().String()
	}
	return o.limit().String()
}

// outageStarted starts an outage at local time now, after err, and logs it unless
// another was logged less than quietPeriod before.
func (o *ops) outageStarted(err error, now int64) {
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
	attrs := []any{"limiter", o.name, "error", err.Error(), "policy", o.policy.String(), "admits", o.admits()}
	if o.unlogged > 0 {
		attrs = append(attrs, "outages_not_logged", o.unlogged)
	}
	o.log().Warn("redislimit: Redis failed; the failure policy decides until Redis answers again", attrs...)
	o.lastLogged, o.anyLogged, o.unlogged = now, true, 0
}

// scriptFailed logs err, a script error (ErrScript) at local time now, at
// Error level, unless another was logged less than quietPeriod before: a
// bug or an incompatibility of the server's Lua, which fails every call
// alike, and which no failure policy answers for (see guard.failed).
func (o *ops) scriptFailed(err error, now int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.anyScript && now-o.lastScript < quietPeriod {
		o.scriptUnlogged++
		return
	}
	attrs := []any{"limiter", o.name, "error", err.Error()}
	if o.scriptUnlogged > 0 {
		attrs = append(attrs, "script_errors_not_logged", o.scriptUnlogged)
	}
	o.log().Error("redislimit: the script failed on the server (a bug or an incompatibility, not an outage); the requests are refused", attrs...)
	o.lastScript, o.anyScript, o.scriptUnlogged = now, true, 0
}

// outageEnded ends the outage under way at local time now, and logs its end
// if its start was logged.
func (o *ops) outageEnded(now int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.CompareAndSwap(true, false) || !o.logged {
		return
	}
	o.log().Info("redislimit: Redis answers again; decisions are exact again", "limiter", o.name,
		"outage", time.Duration(now-o.since), "fallbacks", o.counts.fallbacks()-o.before)
}

// announce logs msg and what the failure policy will admit for the limiter
// whose keys have prefix, under the limits they are under: at construction,
// and again when SetKeyLimit changes whether the keys have limits of their
// own. It logs at Info when neither the policy
// nor the fleet size was chosen (the default divides the limit by the
// fleet's size learned on Redis), at Warn when they disagree (FailLocal(k) in a fleet of
// more than k), at Debug otherwise.
func (o *ops) announce(msg, prefix string, chosen bool) {
	level := slog.LevelDebug
	switch {
	case !chosen:
		level = slog.LevelInfo
	case o.policy.tooSmall(o.fleet):
		level = slog.LevelWarn
	}
	lg := o.log()
	if !lg.Enabled(context.Background(), level) {
		return
	}
	attrs := []any{"limiter", o.name, "prefix", prefix, "limit", o.limitText(),
		"policy", o.policy.String(), "admits", o.admits()}
	if !chosen {
		attrs = append(attrs, "hint", "the fleet's size is learned on Redis while it answers; WithFleetSize(N) fixes it")
	}
	lg.Log(context.Background(), level, msg, attrs...)
}
