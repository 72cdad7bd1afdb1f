package keylimit

import "context"

// Criticality is how much a request matters when there is not room for
// all: under pressure an Adaptive sheds Sheddable requests first and
// Critical ones last (see Adaptive for the rule). A request carries it in
// its context (WithCriticality); one that carries none is Default, the zero
// value.
//
// The rate limiters and Concurrency decide by their limits alone and do
// not read it: a refusal there is the key over a number someone chose, not
// the server short of capacity.
type Criticality int8

const (
	// Default is the criticality of a request that says none: admitted up
	// to the limit.
	Default Criticality = iota
	// Critical requests are shed last: an Adaptive admits them whenever
	// all its keys hold less than three times the overall limit (its hard bound,
	// never above the ceiling), whatever the key's own limit.
	Critical
	// Sheddable requests are shed first: admitted only below three quarters
	// of the limit.
	Sheddable
)

// criticalityKey is the context key of a request's Criticality.
type criticalityKey struct{}

// WithCriticality returns a copy of ctx carrying c, which CriticalityOf
// reads and an Adaptive's Acquire decides by. A value other than the three
// constants is taken as Default.
func WithCriticality(ctx context.Context, c Criticality) context.Context {
	return context.WithValue(ctx, criticalityKey{}, c.valid())
}

// CriticalityOf returns the Criticality ctx carries (WithCriticality), or
// Default if it carries none.
func CriticalityOf(ctx context.Context) Criticality {
	c, _ := ctx.Value(criticalityKey{}).(Criticality)
	return c
}

// valid is c, or Default if c is none of the three constants.
func (c Criticality) valid() Criticality {
	if c < Default || c > Sheddable {
		return Default
	}
	return c
}

// room is how many slots a request of criticality c may see held, with
// itself, under limit, with ceiling the most ever: Sheddable three quarters
// of limit (at least 1), Default limit, Critical three times limit (the
// hard bound), up to ceiling.
func (c Criticality) room(limit, ceiling int64) int64 {
	switch c {
	case Sheddable:
		return max(limit*3/4, 1)
	case Critical:
		return max(min(3*limit, ceiling), limit)
	}
	return limit
}
