package quota

import (
	"context"
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
	// held is the index of the tier's concurrency policy, or -1 if it has
	// none.
	held int
	// charged are the indexes of the policies charged by outcome, those
	// in process first; local of the other rate policies that takeApart
	// admits one by one in process before a remote step (see plan), and
	// plain of the rest, which decider takes from; apart says the tier has
	// held or charged policies (see takeApart).
	charged, local, plain []int
	apart                 bool
	// steps is the order in which takeApart asks the policies (see plan).
	steps []step
	// decider takes a request's cost from every plain policy or from
	// none: the one limiter, or keylimit.All of them; nil if the tier has
	// none.
	decider keylimit.Limiter[string]
	// each is decider if it reports each policy's Result (keylimit.All
	// does), with two policies or more; withCtx is decider if it takes a
	// context, with one.
	each    eachTaker
	withCtx contextTaker
	// field is the last RateLimit-Policy value sent, kept so that a request
	// whose quotas and windows have not changed reuses it, unallocated.
	field atomic.Pointer[policyField]
	// resultsPool holds *[]keylimit.Result for Decide: of len(policies),
	// and if apart len(plain) more, for the plain policies' Results before
	// takeApart puts them in the tier's order.
	resultsPool sync.Pool
	// admissionsPool holds *[]keylimit.Admission for takeApart: of
	// len(local), for their admissions.
	admissionsPool sync.Pool
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
	t := &tier{name: name, held: -1}
	var last *policy // the last rate policy
	for _, p := range ps {
		c, err := compilePolicy(p)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(t.policies, func(o *policy) bool { return o.name == c.name }) {
			return nil, fmt.Errorf("two policies are named %q", c.name)
		}
		switch {
		case c.held != nil && t.held >= 0:
			return nil, fmt.Errorf("policies %q and %q are both concurrency policies: a tier holds at most one", t.policies[t.held].name, c.name)
		case c.held != nil:
			t.held = len(t.policies)
		case c.charge != nil:
			t.charged = append(t.charged, len(t.policies))
		default:
			// keylimit.All would panic: it must be able to give back what
			// the policies before a refusing one took.
			if last != nil && last.refunder == nil {
				return nil, fmt.Errorf("policy %q: its limiter (%T) cannot Refund, so it must be the last policy", last.name, last.limiter)
			}
			last = c
			t.plain = append(t.plain, len(t.policies))
		}
		t.policies = append(t.policies, c)
	}
	t.apart = t.held >= 0 || len(t.charged) > 0
	if t.apart {
		t.plan()
	}
	t.compileDecider()
	return t, nil
}

// compileDecider makes t's decider of its plain policies.
func (t *tier) compileDecider() {
	limiters := make([]keylimit.Limiter[string], 0, len(t.plain))
	for _, i := range t.plain {
		limiters = append(limiters, t.policies[i].limiter)
	}
	switch len(limiters) {
	case 0:
	case 1:
		t.decider = limiters[0]
		t.withCtx, _ = t.decider.(contextTaker)
	default:
		t.decider = keylimit.All(limiters...)
		t.each, _ = t.decider.(eachTaker)
	}
}

// results returns a slice for each policy's Result, from a pool: passed to
// an interface's method, an array on the stack would escape and allocate on
// every request. Put it back when done.
func (t *tier) results() *[]keylimit.Result {
	if r, ok := t.resultsPool.Get().(*[]keylimit.Result); ok {
		return r
	}
	n := len(t.policies)
	if t.apart {
		n += len(t.plain)
	}
	r := make([]keylimit.Result, n)
	return &r
}

// policyField returns the RateLimit-Policy value for these q and w. A
// policy whose w is -1 (not asked: see render) has no member; such a value
// is not kept, so that a refusal does not displace the admissions' value.
func (t *tier) policyField(qw []int64) string {
	if f := t.field.Load(); f != nil && slices.Equal(f.qw, qw) {
		return f.value
	}
	var b []byte
	whole := true
	for i := range t.policies {
		if qw[2*i+1] < 0 {
			whole = false
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t.policies[i].quoted...)
		b = appendParam(b, "q", qw[2*i])
		if i == t.held {
			b = append(b, `;qu="concurrent-requests"`...)
		} else {
			b = appendParam(b, "w", qw[2*i+1])
		}
	}
	if !whole {
		return string(b)
	}
	f := &policyField{qw: slices.Clone(qw), value: string(b)}
	t.field.Store(f)
	return f.value
}

// eachTaker is what keylimit.All returns: a combination that reports the
// Result of each of its limiters (one Redis round trip for a joined set).
type eachTaker interface {
	TakeEach(ctx context.Context, key string, n int, each []keylimit.Result) (keylimit.Result, error)
}

// contextTaker is a limiter whose takes wait on something outside the
// process (keylimit.ContextLimiter's TakeContext), asked under the
// request's context.
type contextTaker interface {
	TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error)
}
