package keylimit

import (
	"fmt"
	"strings"
	"time"

	"github.com/keylimit/keylimit/internal/keystore"
)

// Result reports one decision and the state of the key after it.
//
// Result is returned by value: it is small, and a pointer would make every
// decision allocate.
type Result struct {
	// Allowed reports whether the events were admitted (and consumed).
	Allowed bool
	// Limit is the quota: Burst for a token bucket, Events for a window.
	Limit int
	// Remaining is how many events would still be admitted now, after this
	// decision.
	Remaining int
	// RetryAfter is, when Allowed is false, the least time to wait before the
	// same request can pass; InfDuration when it never can (n above Limit).
	// It is 0 when Allowed is true.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full quota.
	ResetAfter time.Duration
	// RefillAfter is the time until more quota is available: until
	// Remaining is at least one more than now, nothing else taken. For a
	// TokenBucket, until its next token; a SlidingWindow, until its oldest
	// admission in the window leaves it; a SlidingCounter, until its
	// estimate of the count drops by one (at most Period/Events beyond
	// Period); a FixedWindow, until the window ends. It is 0 when the quota
	// is whole (Remaining == Limit), and never more than ResetAfter, nor,
	// when refused, than RetryAfter. A Concurrency limiter has no time: its
	// quota comes back when a slot is released, and RefillAfter is 0, as it
	// is for an Untracked key. It is the "t" of the RateLimit field the
	// quota package writes.
	RefillAfter time.Duration
	// Untracked reports a key the limiter did not track because it holds
	// its maximum number of keys (WithMaxKeys) and none could be evicted.
	// The decision was made by the overflow policy: refused by default,
	// admitted without counting with WithAdmitUntracked. It lets a caller
	// tell "this key is over its limit" from "the limiter is full".
	Untracked bool
	// Banned reports a refusal by a Penalty's ban: the key was refused
	// too often and is refused outright until RetryAfter has passed,
	// whatever its limit would say. It is false whenever Allowed is true.
	Banned bool
	// Err is set when the limiter refused because it could not apply the
	// key's limit: the limit SetKeyLimit's function gave the key is
	// invalid, or a remote limiter's script failed on the server
	// (redislimit.ErrScript). It is nil for every decision made by a
	// limit, admitted or refused.
	Err error
}

// String describes r for logs: "allowed: 7 of 10 left, full in 3s",
// "refused: 0 of 10 left, retry in 1.5s, full in 6s", with "untracked",
// "banned" and the error when they apply.
func (r Result) String() string {
	var b strings.Builder
	if r.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("refused")
	}
	if r.Untracked {
		b.WriteString(" (untracked)")
	}
	if r.Banned {
		b.WriteString(" (banned)")
	}
	fmt.Fprintf(&b, ": %d of %d left", r.Remaining, r.Limit)
	switch {
	case r.Allowed:
	case r.RetryAfter == InfDuration:
		b.WriteString(", never passes")
	default:
		fmt.Fprintf(&b, ", retry in %v", r.RetryAfter)
	}
	if r.ResetAfter > 0 {
		fmt.Fprintf(&b, ", full in %v", r.ResetAfter)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, ": %v", r.Err)
	}
	return b.String()
}

// And returns the Result of two decisions that must both allow, as All
// answers for its limiters: allowed if both are; the lesser Remaining, with
// its Limit; the longer RetryAfter and ResetAfter; the RefillAfter of the
// one with the lesser Remaining (the longer if they tie: the lesser rises
// only when it does); Untracked if either is; Banned if either is and the
// two refuse; r's Err, else o's. It lets a
// caller that decides with two limiters of its own answer as one.
func (r Result) And(o Result) Result {
	switch {
	case o.Remaining < r.Remaining:
		r.Remaining, r.Limit, r.RefillAfter = o.Remaining, o.Limit, o.RefillAfter
	case o.Remaining == r.Remaining:
		r.RefillAfter = max(r.RefillAfter, o.RefillAfter)
	}
	r.Allowed = r.Allowed && o.Allowed
	r.RetryAfter = max(r.RetryAfter, o.RetryAfter)
	r.ResetAfter = max(r.ResetAfter, o.ResetAfter)
	r.Untracked = r.Untracked || o.Untracked
	r.Banned = !r.Allowed && (r.Banned || o.Banned)
	if r.Err == nil {
		r.Err = o.Err
	}
	return r
}

// verdict is what a limiter's decide answers (internal/keystore, which
// package adaptive's limiter shares).
type verdict = keystore.Verdict

const (
	admitted  = keystore.Admitted
	refused   = keystore.Refused   // not now
	never     = keystore.Never     // n above the key's quota, or its limit is invalid
	untracked = keystore.Untracked // the key cap left no place for the key
)

// impossible answers, from a Peek of the key, a request that needs no
// decision: n == 0 (allowed, takes nothing) and n that can never pass. A
// Peek that could not apply the key's limit (Err) is returned as it is.
func impossible(r Result, n int) Result {
	if r.Err != nil {
		return r
	}
	r.Allowed = n == 0
	r.RetryAfter = 0
	if n != 0 {
		r.RetryAfter = InfDuration
	}
	return r
}
