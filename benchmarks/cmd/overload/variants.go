package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

// variant is one way of standing in front of the server: build wraps the
// pool in it, and returns what its limit of a key is now (noLimit if it
// has none), for the plot.
type variant struct {
	name  string
	build func(c config, next http.Handler) (http.Handler, func() float64, error)
}

// variants are every variant of a run, in the order of the table.
var variants = []variant{
	{"no-limit", func(_ config, next http.Handler) (http.Handler, func() float64, error) {
		return next, noLimit, nil
	}},
	{"static-2x-high", staticLimit(2, 1)},
	{"static-2x-low", staticLimit(1, 2)},
}

// staticLimit is a variant of a fixed concurrency limit per tenant, num/den
// times the right one, which is the server's workers before the drop: a
// tenant alone could keep every worker busy and queue nothing.
func staticLimit(num, den int) func(c config, next http.Handler) (http.Handler, func() float64, error) {
	return func(c config, next http.Handler) (http.Handler, func() float64, error) {
		n := max(c.workers*num/den, 1)
		lim, err := keylimit.NewConcurrency[string](n)
		if err != nil {
			return nil, nil, err
		}
		h, err := limited(next, quota.Policy{Name: "inflight", Concurrency: lim})
		return h, func() float64 { return float64(lim.Limit()) }, err
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
