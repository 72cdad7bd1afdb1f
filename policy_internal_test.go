package keylimit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResolveRacingSetLimit pins resolve against a SetLimit that begins a
// generation while resolve is adding a config to the one before: SetLimit
// marks the old generation's configs before that one exists, so resolve
// must mark it itself and resolve again, or a key would stay under a config
// that no later SetLimit reaches.
func TestResolveRacingSetLimit(t *testing.T) {
	p := new(policy[string, gcra])
	calls := 0
	f := func(string) Limit {
		if calls++; calls == 1 {
			// SetLimit lands after resolve has loaded the generation,
			// before it adds the key's config there.
			require.NoError(t, p.set(PerMinute(2)), "SetLimit during resolve")
		}
		return PerHour(7)
	}
	require.NoError(t, p.init(PerMinute(1), options{keyLimit: f}, newGCRA), "init")
	first := p.cur.Load()
	c := p.resolve("k")
	require.False(t, c.stale(), "the config resolve returned: stale, not the current generation's")
	require.Equal(t, PerHour(7), c.limit, "the config resolve returned: limit")
	old, ok := first.byLimit.Load(PerHour(7))
	require.True(t, ok, "the config added to the superseded generation: present")
	require.True(t, old.stale(), "the config added to the superseded generation: marked superseded")
	require.Equal(t, 2, calls, "times the key's limit was asked, once per generation")
	require.NoError(t, p.set(PerMinute(3)), "a later SetLimit")
	require.True(t, c.stale(), "the config resolve returned, after a later SetLimit: marked superseded")
}
