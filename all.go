package keylimit

import "fmt"

// All returns a Limiter that admits n events for a key only if every one of
// limiters admits them: 10 a minute AND 500 an hour on the same API key. A
// refused request takes nothing: All asks the limiters in order, and when one
// refuses, gives back (Refund) what the ones before it took. Put the limiter
// most likely to refuse first.
//
// Every limiter except the last must implement Refunder (all of this module's
// limiters do). All panics if one does not, or if limiters is empty or holds
// a nil: programming errors, found when the program starts.
//
// The Result reports the binding limit: Allowed only if all allowed, the
// least Remaining with its Limit, the largest RetryAfter and ResetAfter (a
// lower bound when refused: the limiters after the one that refused report
// their Peek). The combination also implements Refunder.
func All[K comparable](limiters ...Limiter[K]) Limiter[K] {
	if len(limiters) == 0 {
		panic("keylimit: All needs at least one limiter")
	}
	refunders := make([]Refunder[K], len(limiters)-1)
	for i, l := range limiters {
		if l == nil {
			panic(fmt.Sprintf("keylimit: All: limiter %d is nil", i))
		}
		if i == len(limiters)-1 {
			break
		}
		r, ok := l.(Refunder[K])
		if !ok {
			panic(fmt.Sprintf("keylimit: All: limiter %d (%T) cannot Refund; only the last limiter may lack a Refund method", i, l))
		}
		refunders[i] = r
	}
	return &all[K]{limiters: append([]Limiter[K](nil), limiters...), refunders: refunders}
}

// all is the Limiter that All returns.
type all[K comparable] struct {
	limiters  []Limiter[K]
	refunders []Refunder[K] // refunders[i] is limiters[i]; the last has none
}

// Allow is shorthand for AllowN(key, 1).
func (a *all[K]) Allow(key K) bool { return a.Take(key, 1).Allowed }

// AllowN is shorthand for Take(key, n).Allowed.
func (a *all[K]) AllowN(key K, n int) bool { return a.Take(key, n).Allowed }

// Take takes n from every limiter, or from none.
func (a *all[K]) Take(key K, n int) Result {
	var sum Result
	for i, l := range a.limiters {
		r := l.Take(key, n)
		if !r.Allowed {
			for j := i - 1; j >= 0; j-- {
				a.refunders[j].Refund(key, n)
			}
			return a.refused(key, i, r)
		}
		if i == 0 {
			sum = r
		} else {
			sum = bind(sum, r)
		}
	}
	return sum
}

// refused reports a refusal by limiter i, which answered r: the others, none
// of which holds anything of this request now, are asked what they would say.
func (a *all[K]) refused(key K, i int, r Result) Result {
	sum := r
	for j, l := range a.limiters {
		if j != i {
			sum = bind(sum, l.Peek(key))
		}
	}
	sum.Allowed, sum.Limit = false, r.Limit
	return sum
}

// Peek reports what Take(key, 1) would answer now, taking nothing.
func (a *all[K]) Peek(key K) Result {
	var sum Result
	decider := 0 // the Limit of the first limiter that would refuse
	for i, l := range a.limiters {
		r := l.Peek(key)
		if i == 0 {
			sum = r
		} else {
			sum = bind(sum, r)
		}
		if !r.Allowed && decider == 0 {
			decider = r.Limit
		}
	}
	if decider != 0 {
		sum.Limit = decider
	}
	return sum
}

// bind adds the Result r of one more limiter to the Result sum of those
// before it: the least Remaining binds, and brings its Limit.
func bind(sum, r Result) Result {
	if r.Remaining < sum.Remaining {
		sum.Remaining, sum.Limit = r.Remaining, r.Limit
	}
	sum.Allowed = sum.Allowed && r.Allowed
	sum.RetryAfter = max(sum.RetryAfter, r.RetryAfter)
	sum.ResetAfter = max(sum.ResetAfter, r.ResetAfter)
	sum.Untracked = sum.Untracked || r.Untracked
	return sum
}

// Reset resets key in every limiter.
func (a *all[K]) Reset(key K) {
	for _, l := range a.limiters {
		l.Reset(key)
	}
}

// Refund gives n back to every limiter that can take it back.
func (a *all[K]) Refund(key K, n int) {
	for _, r := range a.refunders {
		r.Refund(key, n)
	}
	if last, ok := a.limiters[len(a.limiters)-1].(Refunder[K]); ok {
		last.Refund(key, n)
	}
}

var (
	_ Limiter[string]  = (*all[string])(nil)
	_ Refunder[string] = (*all[string])(nil)
)
