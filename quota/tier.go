package quota

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/keylimit/keylimit"
)

// tier is the set of policies a request meets together.
type tier struct {
	name     string
	policies []*policy
	// decider takes a request's cost from every policy or from none: the
	// one limiter, or keylimit.All of them.
	decider keylimit.Limiter[string]
	// each is decider if it reports each policy's Result (keylimit.All
	// does), with two policies or more; withCtx is decider if it takes a
	// context, with one.
	each    keylimit.EachTaker[string]
	withCtx keylimit.ContextLimiter[string]
	// field is the last RateLimit-Policy value sent, kept so that a request
	// whose quotas and windows have not changed reuses it, unallocated.
	field atomic.Pointer[policyField]
	// resultsPool holds *[]keylimit.Result of len(policies), for Decide.
	resultsPool sync.Pool
}

// policyField is a RateLimit-Policy value and the q and w it was made from.
type policyField struct {
	qw    []int64 // q and w of each policy, in turn
	value string
}

func compileTier(name string, ps []Policy) (*tier, error) {
	if len(ps) == 0 {
		if name == "" {
			return nil, errors.New("Config.Policies is empty: give at least one Policy")
		}
		return nil, fmt.Errorf("tier %q has no policies", name)
	}
	t := &tier{name: name}
	limiters := make([]keylimit.Limiter[string], 0, len(ps))
	for i, p := range ps {
		c, err := compilePolicy(p)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(t.policies, func(o *policy) bool { return o.name == c.name }) {
			return nil, fmt.Errorf("two policies are named %q", c.name)
		}
		// keylimit.All would panic: it must be able to give back what the
		// policies before a refusing one took.
		if _, ok := c.limiter.(keylimit.Refunder[string]); !ok && i < len(ps)-1 {
			return nil, fmt.Errorf("policy %q: its limiter (%T) cannot Refund, so it must be the last policy", c.name, c.limiter)
		}
		t.policies = append(t.policies, c)
		limiters = append(limiters, c.limiter)
	}
	t.decider = limiters[0]
	if len(limiters) > 1 {
		t.decider = keylimit.All(limiters...)
		t.each, _ = t.decider.(keylimit.EachTaker[string])
	} else {
		t.withCtx, _ = t.decider.(keylimit.ContextLimiter[string])
	}
	return t, nil
}

// results returns a slice for each policy's Result, from a pool: passed to
// an interface's method, an array on the stack would escape and allocate on
// every request. Put it back when done.
func (t *tier) results() *[]keylimit.Result {
	if r, ok := t.resultsPool.Get().(*[]keylimit.Result); ok {
		return r
	}
	r := make([]keylimit.Result, len(t.policies))
	return &r
}

// policyField returns the RateLimit-Policy value for these q and w.
func (t *tier) policyField(qw []int64) string {
	if f := t.field.Load(); f != nil && slices.Equal(f.qw, qw) {
		return f.value
	}
	var b []byte
	for i := range t.policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t.policies[i].quoted...)
		b = appendParam(b, "q", qw[2*i])
		b = appendParam(b, "w", qw[2*i+1])
	}
	f := &policyField{qw: slices.Clone(qw), value: string(b)}
	t.field.Store(f)
	return f.value
}
