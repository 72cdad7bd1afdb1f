package redislimit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// FailurePolicy is what a limiter answers while Redis fails: when a script
// call returns an error or outlasts its deadline (not when the script
// itself failed: see ErrScript). Make one with FailOpen,
// FailClosed or FailLocal; the zero value is not a policy.
//
// Whatever the policy, the error is passed to the WithOnError callback and
// returned by the methods that return errors. For the failure backoff
// (WithFailureBackoff) that follows, decisions are answered by the policy
// without asking Redis; then Redis is asked again.
type FailurePolicy struct {
	kind      failKind
	instances int // FailLocal: the expected number of instances
	// live: the default policy, FailLocal of the live fleet's size, which
	// the limiter learns on Redis (heartbeat.go); instances is then 1, the
	// size until the first is learned.
	live bool
	err  error // an invalid FailLocal argument, reported by the constructor
}

// defaultPolicy is the failure policy without WithFailurePolicy and
// WithFleetSize: FailLocal of the live fleet's size.
func defaultPolicy() FailurePolicy { return FailurePolicy{kind: failLocal, instances: 1, live: true} }

type failKind int

const (
	failOpen failKind = iota + 1
	failClosed
	failLocal
)

// FailOpen admits every request while Redis fails: availability first, and
// no limit at all across the fleet. The Result is Allowed with the full
// quota Remaining, as for a new key.
func FailOpen() FailurePolicy { return FailurePolicy{kind: failOpen} }

// FailClosed refuses every request while Redis fails: protection first, and
// nothing admitted across the fleet. The
// Result is refused with Remaining 0, and RetryAfter, RefillAfter and
// ResetAfter the limit's interval (Period / Events). Redis is asked again once the failure
// backoff has passed (WithFailureBackoff), which may be later.
func FailClosed() FailurePolicy { return FailurePolicy{kind: failClosed} }

// FailLocal decides in process while Redis fails, with a keylimit limiter of
// the same algorithm whose quota is the limit divided by instances, the
// number of instances expected to share the load: a fleet of N then admits
// up to N/instances times the limit (Events and Burst are divided rounding
// down, never below 1). FailLocal(1) gives each instance the whole limit: a
// fleet of N admits N times it. (The default, without WithFailurePolicy and
// WithFleetSize, is FailLocal of the live fleet's size, which each instance
// learns on Redis while it answers: see WithFleetSize.) A
// share above what the in-memory type takes falls back to the nearest type
// that takes it (a SlidingCounter, then a TokenBucket of the same rate). The
// fallback keeps its state between outages; Close releases it.
func FailLocal(instances int) FailurePolicy {
	if instances < 1 {
		return FailurePolicy{kind: failLocal, err: fmt.Errorf("redislimit: FailLocal(%d): instances is below 1", instances)}
	}
	return FailurePolicy{kind: failLocal, instances: instances}
}

// String describes p: "fail open", "fail closed", "fail local/3".
func (p FailurePolicy) String() string {
	switch p.kind {
	case failOpen:
		return "fail open"
	case failClosed:
		return "fail closed"
	case failLocal:
		if p.live {
			return "fail local/fleet"
		}
		return fmt.Sprintf("fail local/%d", p.instances)
	}
	return "no failure policy"
}

// local reports whether p decides in process while Redis fails, by a
// fallback limiter of its share (FailLocal).
func (p FailurePolicy) local() bool { return p.kind == failLocal }

// decide is p's answer to a request of n of a quota q while Redis fails,
// under FailOpen and FailClosed: admitted, taking nothing anywhere, or
// refused until retry, when Redis is asked again (timed: a rate limit, whose
// refusal says when more quota comes, ResetAfter and RefillAfter; a
// concurrency limit has no such time). ok is false under FailLocal: the
// fallback limiter answers, for a rate limit and a concurrency limit alike.
// Every decision of what a failure policy admits is made here.
func (p FailurePolicy) decide(q, n int, retry time.Duration, timed bool) (r keylimit.Result, ok bool) {
	switch p.kind {
	case failOpen:
		return keylimit.Result{Allowed: true, Limit: q, Remaining: q - n}, true
	case failClosed:
		r = keylimit.Result{Limit: q, RetryAfter: retry}
		if timed {
			r.ResetAfter, r.RefillAfter = retry, retry
		}
		return r, true
	}
	return keylimit.Result{}, false
}

// tooSmall reports whether p, given with a fleet of fleet instances (0:
// unknown), lets the fleet admit more than the limit: FailLocal(k) of a
// fleet of more than k.
func (p FailurePolicy) tooSmall(fleet int) bool { return p.local() && !p.live && fleet > p.instances }

// liveText says how the default policy learns the fleet's size, for the
// lines logged.
const liveText = "N the instances announced on Redis at its last answer (1 until the first)"

// admitsSlots says what p admits while Redis fails, for a concurrency limit
// of n slots, of which an instance of a fleet of k holds concShare(k, n)
// alone (k: p's, or the live fleet's).
func (p FailurePolicy) admitsSlots(n, k int) string {
	switch p.kind {
	case failOpen:
		return "every acquisition: no limit while Redis fails"
	case failClosed:
		return "nothing: every acquisition is refused while Redis fails"
	}
	if p.live {
		return fmt.Sprintf("each instance holds at most 1/N of a key's %d slots alone (at least 1), %s", n, liveText)
	}
	return fmt.Sprintf("each instance holds at most %d slots of a key alone (the limit is %d)", concShare(k, n), n)
}

// share divides l among k instances for the fallback limiter: k is
// p.instances, or under the default policy the live fleet's size.
func (p FailurePolicy) share(l keylimit.Limit, k int) keylimit.Limit {
	if k <= 1 {
		return l
	}
	s := keylimit.Per(max(l.Events/k, 1), l.Period)
	s.Calendar, s.Location = l.Calendar, l.Location
	if b := l.BurstSize(); b != l.Events {
		s = s.WithBurst(max(b/k, 1))
	}
	return s
}

// admits says what p admits while Redis fails, for one instance and for
// the fleet (of fleet instances, as WithFleetSize says, or of N when it
// does not), under l, the limiter's limit, or with perKey under each key's
// (SetKeyLimit).
func (p FailurePolicy) admits(l keylimit.Limit, fleet int, perKey bool) string {
	switch p.kind {
	case failOpen:
		return "every request: no limit while Redis fails"
	case failClosed:
		return "nothing: every request is refused while Redis fails"
	}
	if p.live {
		if perKey {
			return "each instance decides alone on 1/N of each key's limit, " + liveText + ", so the fleet admits up to about each key's limit"
		}
		return fmt.Sprintf("each instance decides alone on 1/N of %v, %s, so the fleet admits up to about %v", l, liveText, l)
	}
	if perKey {
		return p.admitsPerKey(fleet)
	}
	share := p.share(l, p.instances)
	if fleet == 0 {
		return fmt.Sprintf("each instance decides alone on %v, so a fleet of N instances admits up to N × %v", share, share)
	}
	return fmt.Sprintf("each instance decides alone on %v, so a fleet of %d admits up to %v (the limit is %v)",
		share, fleet, times(share, fleet), l)
}

// admitsPerKey is admits for FailLocal when the keys are under limits of
// their own: the same share of each.
func (p FailurePolicy) admitsPerKey(fleet int) string {
	share := "each key's limit"
	if p.instances > 1 {
		share = fmt.Sprintf("1/%d of each key's limit", p.instances)
	}
	switch {
	case fleet == 0:
		return fmt.Sprintf("each instance decides alone on %s, so a fleet of N instances admits up to N × %s", share, share)
	case fleet == p.instances:
		return fmt.Sprintf("each instance decides alone on %s, so a fleet of %d admits up to each key's limit", share, fleet)
	case p.instances == 1:
		return fmt.Sprintf("each instance decides alone on %s, so a fleet of %d admits up to %d × each key's limit", share, fleet, fleet)
	}
	return fmt.Sprintf("each instance decides alone on %s, so a fleet of %d admits up to %d/%d of each key's limit",
		share, fleet, fleet, p.instances)
}

// times returns l with its events and burst multiplied by n: what n
// instances deciding alone on l admit between them.
func times(l keylimit.Limit, n int) keylimit.Limit {
	m := keylimit.Per(l.Events*n, l.Period)
	m.Calendar, m.Location = l.Calendar, l.Location
	if b := l.BurstSize(); b != l.Events {
		m = m.WithBurst(b * n)
	}
	return m
}

// fallbackKeyLimit is the FailLocal fallback's SetKeyLimit function: each
// key's share of its limit among k instances.
func (p FailurePolicy) fallbackKeyLimit(f func(string) keylimit.Limit, k int) func(string) keylimit.Limit {
	return func(key string) keylimit.Limit {
		l := f(key)
		if l == (keylimit.Limit{}) {
			return l
		}
		return p.share(l, k)
	}
}

// ErrUnavailable is the error of a call that did not ask Redis because Redis
// failed less than the failure backoff ago (see WithFailureBackoff). It is
// returned wrapped in an *Error, and not passed to WithOnError, which sees
// the failures themselves.
var ErrUnavailable = errors.New("redislimit: Redis failed within the failure backoff, not asked")

// ErrScript is wrapped by the error of a call whose script failed on the
// server: it did not compile, or raised an error as it ran (a bug, or a
// server whose Lua differs), which no retry mends. It is no outage, and no
// failure policy answers for it: the request is refused, with the error in
// the Result's Err too, and Allow returns false. The error goes to the
// WithOnError callback, is counted in Stats' ScriptErrors (not in Errors)
// and is logged at Error level. (NOSCRIPT, a server that lost the scripts,
// is no script error: the script is sent again.)
var ErrScript = errors.New("redislimit: the script failed on the server")

// scriptFailure returns err wrapped with ErrScript if it is a script error:
// an error reply "ERR Error compiling script", "ERR Error running script"
// (Redis 6 and miniredis), or an "ERR" one raised inside the script, which
// Redis 7 ends with "script: <sha>, on @user_script:<line>.". The error
// replies of the commands a script calls keep their own codes (OOM,
// READONLY, WRONGTYPE, ...) and are not script errors: they say what the
// server cannot do, not what the script got wrong. Any other err is
// returned as it is.
func scriptFailure(err error) error {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) {
		return err
	}
	msg := reply.Error()
	if !strings.HasPrefix(msg, "ERR ") {
		return err
	}
	if strings.Contains(msg, "Error compiling script") || strings.Contains(msg, "Error running script") ||
		strings.Contains(msg, "@user_script:") {
		return fmt.Errorf("%w: %w", ErrScript, err)
	}
	return err
}

// Error is the error of a Redis call that failed: the one passed to the
// WithOnError callback and returned by TakeContext, PeekContext and
// RefundContext.
type Error struct {
	Op  string // "take", "peek", "reset" or "refund"; a Concurrency's "acquire" or "peek"
	Key string // the key, without the prefix
	Err error  // what the client returned: a timeout, a network error, a Redis error
}

func (e *Error) Error() string {
	return fmt.Sprintf("redislimit: %s %.64q: %v", e.Op, e.Key, e.Err) // a key may come from a request: 64 runes of it
}

// Unwrap returns e.Err, so that errors.Is(err, context.DeadlineExceeded)
// tells a timeout.
func (e *Error) Unwrap() error { return e.Err }
