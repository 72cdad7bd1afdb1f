package conformance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
	"github.com/keylimit/keylimit/internal/ratefields"
)

// Quota is one member of a RateLimit-Policy field: a policy's name, its
// quota q and its window w in seconds.
type Quota struct {
	Name string
	Q, W int64
}

// Service is one member of a RateLimit field: a policy's name, what
// remains of its quota (r), and the seconds of its reset parameter (t).
type Service struct {
	Name string
	R, T int64
}

// ParsePolicy parses the lines of a RateLimit-Policy field as keylimit
// writes them, by the draft's rules: a non-empty List of Items, each a
// String with q, a non-negative Integer, and w, a positive Integer. Any
// other parameter, which keylimit never sends, is an error too.
func ParsePolicy(lines []string) ([]Quota, error) {
	members, err := items(lines, "q", "w")
	if err != nil {
		return nil, err
	}
	out := make([]Quota, len(members))
	for i, m := range members {
		out[i] = Quota{Name: m.name, Q: m.params["q"], W: m.params["w"]}
		if out[i].W == 0 {
			return nil, fmt.Errorf("member %d (%q): w=0, and the draft's w is positive", i, m.name)
		}
	}
	return out, nil
}

// ParseRateLimit parses the lines of a RateLimit field as keylimit writes
// them: a non-empty List of Items, each a String with r and t,
// non-negative Integers, and no other parameter.
func ParseRateLimit(lines []string) ([]Service, error) {
	members, err := items(lines, "r", "t")
	if err != nil {
		return nil, err
	}
	out := make([]Service, len(members))
	for i, m := range members {
		out[i] = Service{Name: m.name, R: m.params["r"], T: m.params["t"]}
	}
	return out, nil
}

// ParseRetryAfter parses a Retry-After value as keylimit writes it:
// delay-seconds (RFC 9110: one or more digits), at least 1 (0 would mean
// "retry at once").
func ParseRetryAfter(lines []string) (int64, error) {
	if len(lines) != 1 {
		return 0, fmt.Errorf("%d Retry-After lines", len(lines))
	}
	v := lines[0]
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("Retry-After %q is not delay-seconds", v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("Retry-After %q is not a delay of at least 1 s", v)
	}
	return n, nil
}

type member struct {
	name   string
	params map[string]int64
}

// items parses lines as a List whose members are Items with a String
// value and exactly the parameters keys, each a non-negative Integer.
func items(lines []string, keys ...string) ([]member, error) {
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return nil, fmt.Errorf("%q is not an RFC 9651 List: %w", lines, err)
	}
	if len(list) == 0 {
		return nil, errors.New("an empty List")
	}
	out := make([]member, len(list))
	for i, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			return nil, fmt.Errorf("member %d of %q is a %T, not an Item", i, lines, m)
		}
		name, ok := it.Value.(string)
		if !ok {
			return nil, fmt.Errorf("member %d of %q is a %T, not a String", i, lines, it.Value)
		}
		if got := it.Params.Names(); len(got) != len(keys) {
			return nil, fmt.Errorf("member %d of %q has parameters %q, want %q", i, lines, got, keys)
		}
		out[i] = member{name: name, params: make(map[string]int64, len(keys))}
		for _, k := range keys {
			v, _ := it.Params.Get(k)
			n, ok := v.(int64)
			if !ok || n < 0 {
				return nil, fmt.Errorf("member %d of %q: %s is %#v, not a non-negative Integer", i, lines, k, v)
			}
			out[i].params[k] = n
		}
	}
	return out, nil
}

// Read is what a RateLimit field says by httpsfv's parse, read as
// ratefields.ReadRateLimit reads it: the largest t of the Items with a String
// value and r=0 (exhausted), and of all of them (any), -1 where there is
// none; r and t count only as non-negative Integers. ok is false if httpsfv
// rejects the field, which a client then ignores.
func Read(lines []string) (exhausted, any int64, ok bool) {
	list, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		return -1, -1, false
	}
	exhausted, any = -1, -1
	for _, m := range list {
		it, isItem := m.(httpsfv.Item)
		if !isItem {
			continue
		}
		if _, named := it.Value.(string); !named {
			continue
		}
		param := func(k string) int64 {
			v, _ := it.Params.Get(k)
			if n, ok := v.(int64); ok && n >= 0 {
				return n
			}
			return -1
		}
		r, t := param("r"), param("t")
		if t < 0 {
			continue
		}
		any = max(any, t)
		if r == 0 {
			exhausted = max(exhausted, t)
		}
	}
	return exhausted, any, true
}

// Fields are the rate-limit fields of one answer, each as its lines (its
// metadata values, for gRPC).
type Fields struct {
	RateLimit, RateLimitPolicy, RetryAfter []string
}

// Check parses the fields of an answer to req with httpsfv and checks them
// against the scenario: RateLimit-Policy and RateLimit are Lists of one
// String Item per policy of the key's tier, in the same order, with the q
// and w the scenario wants, r at most q; ratefields.ReadRateLimit reads the
// RateLimit field as httpsfv does; Retry-After is delay-seconds of at
// least 1 on a refusal that can pass (retry), absent otherwise. It
// returns the RateLimit members.
func (s Scenario) Check(req Request, f Fields, retry bool) ([]Service, error) {
	policies, err := ParsePolicy(f.RateLimitPolicy)
	if err != nil {
		return nil, fmt.Errorf("RateLimit-Policy: %w", err)
	}
	services, err := ParseRateLimit(f.RateLimit)
	if err != nil {
		return nil, fmt.Errorf("RateLimit: %w", err)
	}
	if len(policies) != len(services) {
		return nil, fmt.Errorf("%d RateLimit-Policy members, %d RateLimit members", len(policies), len(services))
	}
	for i, p := range policies {
		if want := s.Want(req.Key, p.Name); p != want {
			return nil, fmt.Errorf("RateLimit-Policy member %d is %+v, want %+v", i, p, want)
		}
		if sv := services[i]; sv.Name != p.Name || sv.R > p.Q {
			return nil, fmt.Errorf("RateLimit member %d is %+v, for policy %+v", i, sv, p)
		}
	}
	exhausted, any := ratefields.ReadRateLimit(strings.Join(f.RateLimit, ","))
	if e, a, _ := Read(f.RateLimit); e != exhausted || a != any {
		return nil, fmt.Errorf("ratefields.ReadRateLimit reads %d, %d of %q; httpsfv %d, %d", exhausted, any, f.RateLimit, e, a)
	}
	switch {
	case retry:
		if _, err := ParseRetryAfter(f.RetryAfter); err != nil {
			return nil, err
		}
	case len(f.RetryAfter) != 0:
		return nil, fmt.Errorf("Retry-After %q on an answer that is not a refusal a retry can pass", f.RetryAfter)
	}
	return services, nil
}
