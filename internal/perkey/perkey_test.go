package perkey

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// limit stands for keylimit.Limit: comparable, its zero value "the
// limiter's own".
type limit struct{ events int }

// config is a limiter's config in these tests: it records what Limits
// tells it.
type config struct {
	limit      limit
	err        error
	superseded atomic.Bool
}

func (c *config) Refuse(err error) { c.err = err }
func (c *config) Supersede()       { c.superseded.Store(true) }

var errInvalid = errors.New("events below 1")

// build makes the config of l, invalid below 1 event.
func build(l limit) (*config, error) {
	c := &config{limit: l}
	if l.events < 1 {
		return c, errInvalid
	}
	return c, nil
}

func newLimits(t *testing.T, own limit, f func(string) limit) *Limits[string, limit, *config] {
	t.Helper()
	p := new(Limits[string, limit, *config])
	require.NoError(t, p.Init(own, f, build), "Init")
	return p
}

// TestResolve: a key is under the limiter's own config without a per-key
// function, and when the function gives the zero limit or the limiter's
// own; keys given one limit share its config; an invalid limit gets a
// config refused with the error both kinds of limiter report.
func TestResolve(t *testing.T) {
	tiers := map[string]limit{"gold": {100}, "gold2": {100}, "own": {10}, "bad": {-1}}
	p := newLimits(t, limit{10}, func(key string) limit { return tiers[key] })
	own := p.Default()
	require.Equal(t, limit{10}, p.Limit(), "Limit")
	require.Same(t, own, p.Resolve("nobody"), "a key the function gives the zero limit")
	require.Same(t, own, p.Resolve("own"), "a key the function gives the limiter's own limit")
	gold := p.Resolve("gold")
	require.Equal(t, limit{100}, gold.limit, "a tier's config: limit")
	require.Same(t, gold, p.Resolve("gold2"), "two keys of one tier: one config")
	bad := p.Resolve("bad")
	require.EqualError(t, bad.err, "keylimit: the per-key limit function gave this key an invalid limit: events below 1",
		"an invalid key limit: the config's error")
	require.Nil(t, gold.err, "a valid key limit: no error")

	q := newLimits(t, limit{10}, nil)
	require.Same(t, q.Default(), q.Resolve("gold"), "no per-key function: every key under the limiter's own")
}

// TestSetBeginsAGeneration: Set and SetKeyLimit mark every config of the
// generation before superseded, and keys resolve to new ones; an invalid
// limit is refused and changes nothing.
func TestSetBeginsAGeneration(t *testing.T) {
	f := func(key string) limit {
		if key == "gold" {
			return limit{100}
		}
		return limit{}
	}
	p := newLimits(t, limit{10}, f)
	own, gold := p.Default(), p.Resolve("gold")

	require.ErrorIs(t, p.Set(limit{0}), errInvalid, "Set of an invalid limit")
	require.Same(t, own, p.Default(), "after a refused Set: the same generation")
	require.False(t, own.superseded.Load() || gold.superseded.Load(), "after a refused Set: nothing superseded")

	require.NoError(t, p.Set(limit{20}), "Set")
	require.True(t, own.superseded.Load(), "the old generation's own config: superseded")
	require.True(t, gold.superseded.Load(), "the old generation's tier config: superseded")
	require.Equal(t, limit{20}, p.Limit(), "Limit after Set")
	gold2 := p.Resolve("gold")
	require.NotSame(t, gold, gold2, "a tier's config after Set: a new one")
	require.Equal(t, limit{100}, gold2.limit, "Set keeps the per-key function")

	require.NoError(t, p.SetKeyLimit(nil), "SetKeyLimit(nil)")
	require.True(t, gold2.superseded.Load(), "SetKeyLimit supersedes too")
	require.Same(t, p.Default(), p.Resolve("gold"), "without a per-key function: the limiter's own")
	require.Equal(t, limit{20}, p.Limit(), "SetKeyLimit keeps the limit")
}

// TestResolveRacingSet pins Resolve against a Set that begins a generation
// while Resolve is adding a config to the one before: Set marks the old
// generation's configs before that one exists, so Resolve must mark it
// itself and resolve again, or a key would stay under a config that no
// later Set reaches. (It was keylimit's TestResolveRacingSetLimit, when the
// generations lived in the root package.)
func TestResolveRacingSet(t *testing.T) {
	p := new(Limits[string, limit, *config])
	calls := 0
	f := func(string) limit {
		if calls++; calls == 1 {
			// Set lands after Resolve has loaded the generation, before
			// it adds the key's config there.
			require.NoError(t, p.Set(limit{2}), "Set during Resolve")
		}
		return limit{7}
	}
	require.NoError(t, p.Init(limit{1}, f, build), "Init")
	first := p.cur.Load()
	c := p.Resolve("k")
	require.False(t, c.superseded.Load(), "the config Resolve returned: stale, not the current generation's")
	require.Equal(t, limit{7}, c.limit, "the config Resolve returned: limit")
	old, ok := first.byLimit.Load(limit{7})
	require.True(t, ok, "the config added to the superseded generation: present")
	require.True(t, old.superseded.Load(), "the config added to the superseded generation: marked superseded")
	require.Equal(t, 2, calls, "times the key's limit was asked, once per generation")
	require.NoError(t, p.Set(limit{3}), "a later Set")
	require.True(t, c.superseded.Load(), "the config Resolve returned, after a later Set: marked superseded")
}

// TestResolveConcurrent: goroutines resolving one tier's keys while Sets
// run get, once the Sets are done, one config per limit, and never one
// that a finished Set left unsuperseded in an old generation.
func TestResolveConcurrent(t *testing.T) {
	p := newLimits(t, limit{10}, func(string) limit { return limit{5} })
	const goroutines, rounds = 8, 2000
	var wg sync.WaitGroup
	seen := make([][]*config, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				seen[g] = append(seen[g], p.Resolve("k"))
			}
		}()
	}
	for i := range 100 {
		require.NoError(t, p.Set(limit{10 + i%2}), "Set %d", i)
	}
	wg.Wait()
	final := p.Resolve("k")
	require.False(t, final.superseded.Load(), "the config of the current generation: not superseded")
	for g := range seen {
		for _, c := range seen[g] {
			require.True(t, c == final || c.superseded.Load(), "a config from an old generation: superseded")
		}
	}
}
