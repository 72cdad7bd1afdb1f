package conformance

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// A Scenario is a configuration of policies and a sequence of requests
// (or calls) to send through it, on a mock clock: the same for every
// transport, which must write the same fields for each.
type Scenario struct {
	Name string
	// Build makes the policies on c: the default tier's, and the named
	// tiers' if Tier is set.
	Build func(c clock.Clock) (policies []quota.Policy, tiers map[string][]quota.Policy, err error)
	// Tier names the tier of a key; nil means no tiers.
	Tier func(key string) string
	// Cost is the cost of a request to op (a path, a method); nil means 1.
	Cost   func(op string) int
	DryRun bool
	// Keys and Ops are what Requests draws from.
	Keys, Ops []string
	// Want returns the q and w each policy of the key's tier must announce.
	Want func(key, policy string) Quota
}

// CostOf returns the cost of a request to op.
func (s Scenario) CostOf(op string) int {
	if s.Cost == nil {
		return 1
	}
	return s.Cost(op)
}

// Request is one request of a Scenario: after the clock has moved on by
// Step, key sends a request to op.
type Request struct {
	Step    time.Duration
	Key, Op string
}

// Requests returns the Scenario's 60 requests: mostly at once, so that
// quotas run out, with pauses of up to 20 s, so that they come back.
func (s Scenario) Requests() []Request {
	rng := rand.New(rand.NewPCG(uint64(len(s.Name)), 23))
	out := make([]Request, 60)
	for i := range out {
		out[i] = Request{Key: s.Keys[rng.IntN(len(s.Keys))], Op: s.Ops[rng.IntN(len(s.Ops))]}
		if rng.IntN(10) >= 7 {
			out[i].Step = time.Duration(1+rng.IntN(20000)) * time.Millisecond
		}
	}
	return out
}

// Scenarios are every kind of limiter a policy can count in (the four
// types, All of two, keys with their own limit, a key cap), several
// policies on one key, tiers, costs, a dry run and a name that needs
// escaping.
func Scenarios() []Scenario {
	one := func(name string, q, w int64) func(string, string) Quota {
		return func(string, string) Quota { return Quota{name, q, w} }
	}
	single := func(name string, q, w int64, build func(c clock.Clock) (keylimit.Limiter[string], error)) Scenario {
		return Scenario{
			Name: name,
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				lim, err := build(c)
				return []quota.Policy{{Name: name, Limiter: lim}}, nil, err
			},
			Keys: []string{"alice", "bob"}, Ops: []string{"/"},
			Want: one(name, q, w),
		}
	}
	return []Scenario{
		single("bucket", 10, 60, func(c clock.Clock) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(c))
		}),
		single("burst", 5, 5, func(c clock.Clock) (keylimit.Limiter[string], error) {
			return keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(5), keylimit.WithClock(c))
		}),
		single("fixed", 5, 60, func(c clock.Clock) (keylimit.Limiter[string], error) {
			return keylimit.NewFixedWindow[string](keylimit.PerMinute(5), keylimit.WithClock(c))
		}),
		single("sliding", 5, 60, func(c clock.Clock) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingWindow[string](keylimit.PerMinute(5), keylimit.WithClock(c))
		}),
		single("counter", 5, 60, func(c clock.Clock) (keylimit.Limiter[string], error) {
			return keylimit.NewSlidingCounter[string](keylimit.PerMinute(5), keylimit.WithClock(c))
		}),
		single("untracked", 3, 60, func(c clock.Clock) (keylimit.Limiter[string], error) {
			// One key tracked at a time: the other's requests are
			// untracked, 503 (Unavailable) while alice's state lives.
			return keylimit.NewFixedWindow[string](keylimit.PerMinute(3), keylimit.WithClock(c), keylimit.WithMaxKeys(1),
				keylimit.WithLogger(slog.New(slog.DiscardHandler)))
		}),
		{
			Name: "per-key",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				lim, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(6), keylimit.WithClock(c),
					keylimit.WithKeyLimit(func(key string) keylimit.Limit {
						if key == "vip" {
							return keylimit.PerSecond(2).WithBurst(8)
						}
						return keylimit.PerMinute(6)
					}))
				return []quota.Policy{{Name: "per-key", Limiter: lim}}, nil, err
			},
			Keys: []string{"vip", "bob"}, Ops: []string{"/"},
			Want: func(key, _ string) Quota {
				if key == "vip" {
					return Quota{"per-key", 8, 4}
				}
				return Quota{"per-key", 6, 60}
			},
		},
		{
			Name: "all",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				// Of one quota, so that q is the same whichever binds.
				b, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(6), keylimit.WithClock(c))
				if err != nil {
					return nil, nil, err
				}
				w, err := keylimit.NewSlidingWindow[string](keylimit.PerMinute(6), keylimit.WithClock(c))
				return []quota.Policy{{Name: "both", Limiter: keylimit.All[string](b, w), Window: time.Minute}}, nil, err
			},
			Keys: []string{"alice"}, Ops: []string{"/"},
			Want: one("both", 6, 60),
		},
		{
			Name: "policies",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				return twoPolicies(c, "")
			},
			Keys: []string{"alice", "bob"}, Ops: []string{"/"},
			Want: wantTwo,
		},
		{
			Name: "tiers",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				free, _, err := twoPolicies(c, "")
				if err != nil {
					return nil, nil, err
				}
				gold, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1).WithBurst(20), keylimit.WithClock(c))
				return free, map[string][]quota.Policy{"gold": {{Name: "gold", Limiter: gold}}}, err
			},
			Tier: func(key string) string {
				if key == "gold-1" {
					return "gold"
				}
				return ""
			},
			Keys: []string{"gold-1", "alice"}, Ops: []string{"/"},
			Want: func(key, policy string) Quota {
				if key == "gold-1" {
					return Quota{"gold", 20, 20}
				}
				return wantTwo(key, policy)
			},
		},
		{
			Name: "costs",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				return twoPolicies(c, "")
			},
			Cost: func(op string) int {
				switch op {
				case "/dear":
					return 3
				case "/huge":
					return 100 // above every quota: never passes
				case "/free":
					return 0
				}
				return 1
			},
			Keys: []string{"alice"}, Ops: []string{"/", "/dear", "/dear", "/huge", "/free"},
			Want: wantTwo,
		},
		{
			Name:   "dry run",
			DryRun: true,
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				return twoPolicies(c, "")
			},
			Keys: []string{"alice"}, Ops: []string{"/"},
			Want: wantTwo,
		},
		{
			Name: "escaped name",
			Build: func(c clock.Clock) ([]quota.Policy, map[string][]quota.Policy, error) {
				return twoPolicies(c, `per "minute" \ key`)
			},
			Keys: []string{"alice"}, Ops: []string{"/"},
			Want: func(key, policy string) Quota {
				if policy == `per "minute" \ key` {
					return Quota{policy, 5, 60}
				}
				return wantTwo(key, policy)
			},
		},
	}
}

// twoPolicies are a minute's bucket (5, one a 12 s) named minute, or name
// if set, and an hour's fixed window of 12.
func twoPolicies(c clock.Clock, name string) ([]quota.Policy, map[string][]quota.Policy, error) {
	if name == "" {
		name = "minute"
	}
	minute, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(5), keylimit.WithClock(c))
	if err != nil {
		return nil, nil, err
	}
	hour, err := keylimit.NewFixedWindow[string](keylimit.PerHour(12), keylimit.WithClock(c))
	return []quota.Policy{{Name: name, Limiter: minute}, {Name: "hour", Limiter: hour}}, nil, err
}

func wantTwo(_, policy string) Quota {
	if policy == "hour" {
		return Quota{"hour", 12, 3600}
	}
	return Quota{policy, 5, 60}
}
