package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

// variant is one way of standing in front of the server: build wraps the
// pool in it, and returns what its limits are now, for the plot.
type variant struct {
	name  string
	build func(c config, next http.Handler) (http.Handler, func() limits, error)
}

// limits is what a variant's limits are at one time: the heavy tenant's
// (t0's), a small one's (t1's), and all tenants' together; NaN where it
// has none.
type limits struct{ key, small, overall float64 }

// noLimit is the limits of a variant that has none.
func noLimit() limits { return limits{math.NaN(), math.NaN(), math.NaN()} }

// variants are every variant of a run, in the order of the table.
var variants = []variant{
	{"no-limit", func(_ config, next http.Handler) (http.Handler, func() limits, error) {
		return next, noLimit, nil
	}},
	{"static-2x-high", staticLimit(2, 1)},
	{"static-2x-low", staticLimit(1, 2)},
	{"adaptive-aimd", adaptiveLimit(adaptive.AIMD)},
	{"adaptive-gradient", adaptiveLimit(adaptive.Gradient)},
}

// Adaptive limits range over [adaptiveFloor, adaptiveCeiling] slots: a
// range a user who does not know the server's capacity (8 workers, then
// 4) might choose, 8 times it either way.
const adaptiveFloor, adaptiveCeiling = 1, 64

// adaptiveLimit is a variant of an adaptive.Limiter under alg, through
// httplimit's middleware as a concurrency policy, keyed by tenant.
func adaptiveLimit(alg func(floor, ceiling int) adaptive.Algorithm) func(c config, next http.Handler) (http.Handler, func() limits, error) {
	return func(c config, next http.Handler) (http.Handler, func() limits, error) {
		lim, err := adaptive.New[string](alg(adaptiveFloor, adaptiveCeiling))
		if err != nil {
			return nil, nil, err
		}
		h, err := limited(next, quota.Policy{Name: "adaptive", Concurrency: lim})
		return h, func() limits {
			return limits{float64(lim.Peek(tenantName(0)).Limit), float64(lim.Peek(tenantName(1)).Limit), float64(lim.Stats().Limit)}
		}, err
	}
}

// staticLimit is a variant of a fixed concurrency limit per tenant, num/den
// times the right one, which is the server's workers before the drop: a
// tenant alone could keep every worker busy and queue nothing.
func staticLimit(num, den int) func(c config, next http.Handler) (http.Handler, func() limits, error) {
	return func(c config, next http.Handler) (http.Handler, func() limits, error) {
		n := max(c.workers*num/den, 1)
		lim, err := keylimit.NewConcurrency[string](n)
		if err != nil {
			return nil, nil, err
		}
		h, err := limited(next, quota.Policy{Name: "inflight", Concurrency: lim})
		return h, func() limits { return limits{float64(n), float64(n), math.NaN()} }, err
	}
}

// limited puts next behind httplimit's middleware, keyed by tenant, under
// policy.
func limited(next http.Handler, policy quota.Policy) (http.Handler, error) {
	mw, err := httplimit.New(httplimit.Config{
		Key:             httplimit.Header("X-Tenant"),
		Policies:        []quota.Policy{policy},
		FieldsOnRefusal: true,
	})
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}

// withCriticality marks the context of a request that says
// X-Criticality: critical (or sheddable) with keylimit.WithCriticality,
// for whichever limiter reads it.
func withCriticality(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Criticality") {
		case "critical":
			r = r.WithContext(keylimit.WithCriticality(r.Context(), keylimit.Critical))
		case "sheddable":
			r = r.WithContext(keylimit.WithCriticality(r.Context(), keylimit.Sheddable))
		}
		next.ServeHTTP(w, r)
	})
}

// withDeadline gives each request's context the client's timeout as a
// deadline, as a server told its clients' deadlines would (the pool's work
// does not read it): a request that ends after it is one its client gave
// up on, which an adaptive policy counts as a drop (quota.Outcome.Expired).
func withDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// choose returns the variants named in only, comma-separated ("" is all).
func choose(only string) ([]variant, error) {
	if only == "" {
		return variants, nil
	}
	var out []variant
	for name := range strings.SplitSeq(only, ",") {
		i := -1
		for j, v := range variants {
			if v.name == name {
				i = j
			}
		}
		if i < 0 {
			names := make([]string, len(variants))
			for j, v := range variants {
				names[j] = v.name
			}
			return nil, fmt.Errorf("no variant %q (there are %s)", name, strings.Join(names, ", "))
		}
		out = append(out, variants[i])
	}
	return out, nil
}
