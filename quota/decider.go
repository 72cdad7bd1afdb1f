package quota

import (
	"errors"
	"fmt"
)

// Config configures a Decider: the policies every request meets, the tiers
// that give some requests others, and whether it refuses at all. Policies
// is required.
type Config struct {
	// Policies are the quotas every request meets, all at once: a request
	// passes only if every policy admits it, and a refused request takes
	// nothing from any (keylimit.All). With Tiers, they are the default
	// tier, "".
	Policies []Policy

	// Tiers are other sets of policies, by name ("gold", "free"): a
	// request of a tier named here meets these policies instead of
	// Policies. Each tier counts in its own limiters, so a client moved to
	// another tier starts afresh there.
	Tiers map[string][]Policy

	// DryRun counts every request and says its true Decision, but lets
	// refused requests through (Proceed): to see what a policy would refuse
	// before enforcing it. Requests a policy cannot decide (Result.Err)
	// proceed too.
	DryRun bool

	// FieldsOnRefusal leaves an admitted request's Verdict without field
	// values: its RateLimit and RateLimitPolicy are "", and Decide neither
	// formats them nor asks a limiter for a key's window. A request that is
	// not admitted (refused, failed, or let through by a dry run) has them
	// as usual. For adapters that send the fields on refusals only.
	FieldsOnRefusal bool
}

// Decider decides requests against the policies of a Config. It is safe
// for concurrent use; its limiters are shared by every request it decides.
type Decider struct {
	base            *tier
	tiers           map[string]*tier // nil without Config.Tiers
	dryRun          bool
	fieldsOnRefusal bool
}

// configError is New's error for a configuration that cannot work: reason,
// said by the package; errors.Unwrap returns reason.
func configError(reason error) error { return fmt.Errorf("quota: %w", reason) }

// New returns a Decider of c. It returns an error if c has no policies or
// a policy is invalid: a policy without a name or a Limiter, two of one
// name in a tier, an error from Bucket. Its text is "quota: " and what is
// wrong; errors.Unwrap returns what is wrong alone, for a package that
// builds a Decider from a configuration of its own to say as its own
// (httplimit.New says "httplimit: " and it), and errors.Is and errors.As
// see through it to a cause, such as keylimit's error for an invalid Limit.
func New(c Config) (*Decider, error) {
	base, err := compileTier("", c.Policies)
	if err != nil {
		return nil, configError(err)
	}
	d := &Decider{base: base, dryRun: c.DryRun, fieldsOnRefusal: c.FieldsOnRefusal}
	if len(c.Tiers) > 0 {
		d.tiers = make(map[string]*tier, len(c.Tiers))
		for name, ps := range c.Tiers {
			if name == "" {
				return nil, configError(errors.New(`Config.Tiers has a tier named "": Config.Policies is that tier`))
			}
			if d.tiers[name], err = compileTier(name, ps); err != nil {
				return nil, configError(fmt.Errorf("%w (tier %q)", err, name))
			}
		}
	}
	return d, nil
}
