package keylimit

import "testing"

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
			if err := p.set(PerMinute(2)); err != nil {
				t.Fatal(err)
			}
		}
		return PerHour(7)
	}
	if err := p.init(PerMinute(1), options{keyLimit: f}, newGCRA); err != nil {
		t.Fatal(err)
	}
	first := p.cur.Load()
	c := p.resolve("k")
	if c.stale() || c.limit != PerHour(7) {
		t.Fatalf("resolve returned a config stale %v of %v; want the current generation's, of %v", c.stale(), c.limit, PerHour(7))
	}
	if old, ok := first.byLimit.Load(PerHour(7)); !ok || !old.stale() {
		t.Fatal("the config added to the superseded generation is not marked superseded")
	}
	if calls != 2 {
		t.Fatalf("the key's limit was asked %d times, want 2: once per generation", calls)
	}
	if err := p.set(PerMinute(3)); err != nil {
		t.Fatal(err)
	}
	if !c.stale() {
		t.Fatal("a later SetLimit does not reach the config resolve returned")
	}
}
