package keylimit

import "context"

// Criticality is how much a request matters when there is not room for
// all: under pressure an adaptive limiter (package adaptive) sheds
// Sheddable requests first and Critical ones last (see adaptive.Limiter
// for the rule). A request carries it in
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
	// Critical requests are shed last: an adaptive.Limiter admits them whenever
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
// reads and an adaptive.Limiter's Acquire decides by. A value other than the three
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
