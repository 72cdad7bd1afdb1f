package redislimit

import (
	"fmt"

	"github.com/keylimit/keylimit"
)

// FailurePolicy is what a limiter answers while Redis fails: when a script
// call returns an error or outlasts its deadline. Make one with FailOpen,
// FailClosed or FailLocal; the zero value is not a policy.
//
// Whatever the policy, the error is passed to the WithOnError callback and
// returned by the methods that return errors. For the failure backoff
// (WithFailureBackoff) that follows, calls are answered by the policy
// without asking Redis; then Redis is asked again.
type FailurePolicy struct {
	kind      failKind
	instances int   // FailLocal: the expected number of instances
	err       error // an invalid FailLocal argument, reported by the constructor
}

type failKind int

const (
	failOpen failKind = iota + 1
	failClosed
	failLocal
)

// FailOpen admits every request while Redis fails: availability first. The
// Result is Allowed with the full quota Remaining, as for a new key.
func FailOpen() FailurePolicy { return FailurePolicy{kind: failOpen} }

// FailClosed refuses every request while Redis fails: protection first. The
// Result is refused with Remaining 0 and RetryAfter the limit's interval
// (Period / Events), after which Redis is asked again.
func FailClosed() FailurePolicy { return FailurePolicy{kind: failClosed} }

// FailLocal decides in process while Redis fails, with a keylimit limiter of
// the same algorithm whose quota is the limit divided by instances, the
// number of instances expected to share the load: together they then admit
// about what the fleet would. Events and Burst are divided rounding down,
// and never below 1. FailLocal(1) (the default policy) gives each instance
// the whole limit.
//
// The fallback limiter lives as long as the Redis limiter and keeps its
// state between outages; Close releases it.
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
		return fmt.Sprintf("fail local/%d", p.instances)
	}
	return "no failure policy"
}

// share divides l among p.instances for the fallback limiter.
func (p FailurePolicy) share(l keylimit.Limit) keylimit.Limit {
	if p.instances <= 1 {
		return l
	}
	s := keylimit.Per(max(l.Events/p.instances, 1), l.Period)
	if b := l.BurstSize(); b != l.Events {
		s = s.WithBurst(max(b/p.instances, 1))
	}
	return s
}
