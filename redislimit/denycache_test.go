package redislimit_test

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestDenyCacheSendsNothingWhileDenied: once Redis refuses a key, a flood
// of requests for it (same n or more) is answered in process: INFO
// commandstats counts zero commands over the flood, and each denied call
// allocates nothing. Once the refusal's RetryAfter has passed on the local
// clock, the next call asks Redis again (exactly one command).
func TestDenyCacheSendsNothingWhileDenied(t *testing.T) {
	s := newServer(t) // its own server: commandstats counts only this test
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			mock := clock.NewMock()
			lim, err := typ.new(s.client(t), keylimit.PerHour(5),
				redislimit.WithTimeout(patient), redislimit.WithClock(mock))
			if err != nil {
				t.Fatal(err)
			}
			key := testKey(t, "flooded")
			if !lim.AllowN(key, 5) {
				t.Fatal("AllowN(5) on a new key was refused")
			}
			refusal := lim.Take(key, 1) // Redis refuses: now remembered
			if refusal.Allowed || refusal.RetryAfter <= 0 {
				t.Fatalf("Take after the quota = %+v, want refused", refusal)
			}

			before := s.commands(t)
			const flood = 10_000
			for i := range flood {
				r := lim.Take(key, 1+i%5)
				if r.Allowed || r.Limit != 5 || r.Remaining != 0 || r.RetryAfter != refusal.RetryAfter {
					t.Fatalf("flood call %d: %+v, want the remembered refusal %+v", i, r, refusal)
				}
			}
			if lim.Allow(key) || lim.Peek(key).Allowed {
				t.Fatal("Allow or Peek passed on a denied key")
			}
			if allocs := testing.AllocsPerRun(1000, func() { lim.Allow(key) }); allocs != 0 {
				t.Fatalf("a denied Allow allocates %v times, want 0", allocs)
			}
			if got := s.commands(t) - before; got != 0 {
				t.Fatalf("the flood on a denied key sent %d commands to Redis, want 0", got)
			}

			// Local time passes: the remembered RetryAfter shrinks with it.
			mock.Add(time.Second)
			if r := lim.Take(key, 1); r.RetryAfter != refusal.RetryAfter-time.Second {
				t.Fatalf("a second later: RetryAfter %v, want %v", r.RetryAfter, refusal.RetryAfter-time.Second)
			}
			// Once it has passed, Redis is asked again, once per call.
			mock.Add(refusal.RetryAfter)
			stats := s.commandStats(t)
			lim.Take(key, 1)
			if sent := s.sentSince(t, stats); len(sent) != 1 || sent["evalsha"] != 1 {
				t.Fatalf("a call after RetryAfter sent %v, want evalsha: 1", sent)
			}
		})
	}
}

// TestDenyCacheAsksForSmallerRequests: a refusal of n events says nothing
// of fewer events, so those still go to Redis, and pass if they fit.
func TestDenyCacheAsksForSmallerRequests(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(shared.client(t), keylimit.PerHour(5), redislimit.WithTimeout(patient))
			if err != nil {
				t.Fatal(err)
			}
			key := testKey(t, "k")
			lim.AllowN(key, 3)
			if lim.AllowN(key, 3) {
				t.Fatal("AllowN(3) with 2 left passed")
			}
			if !lim.AllowN(key, 2) {
				t.Fatal("AllowN(2) with 2 left was refused after a refused AllowN(3)")
			}
		})
	}
}

// TestResetAndRefundClearTheDenyCache: Reset and Refund on this instance give
// capacity back, so its remembered refusal must go at once.
func TestResetAndRefundClearTheDenyCache(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(shared.client(t), keylimit.PerHour(3), redislimit.WithTimeout(patient))
			if err != nil {
				t.Fatal(err)
			}
			refunder := lim.(keylimit.Refunder[string])
			key := testKey(t, "k")
			lim.AllowN(key, 2)
			_, last := refunder.Admit(key, 1)
			if lim.Allow(key) {
				t.Fatal("Allow after the quota passed")
			}
			refunder.Refund(key, last)
			if !lim.Allow(key) {
				t.Fatal("Allow after Refund(1) was refused")
			}
			if lim.Allow(key) {
				t.Fatal("second Allow after Refund(1) passed")
			}
			lim.Reset(key)
			if !lim.AllowN(key, 3) {
				t.Fatal("AllowN(3) after Reset was refused")
			}
		})
	}
}

// TestDenyCacheIsBounded: a cache of 2 keys remembers two refused keys; a
// third goes to Redis on every call while both are live, and is remembered
// once the sweep has found the others expired.
func TestDenyCacheIsBounded(t *testing.T) {
	s := newServer(t)
	mock := clock.NewMock()
	lim, err := redislimit.NewTokenBucket(s.client(t), keylimit.PerMinute(1),
		redislimit.WithTimeout(patient), redislimit.WithClock(mock), redislimit.WithDenyCacheSize(2))
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(key string) {
		t.Helper()
		lim.Allow(key)
		if lim.Allow(key) {
			t.Fatalf("the second call on %s passed", key)
		}
	}
	callsFor := func(key string) int64 {
		t.Helper()
		before := s.commandStats(t)
		for range 10 {
			lim.Allow(key)
		}
		return s.sentSince(t, before)["evalsha"]
	}
	refuse("a")
	mock.Add(10 * time.Second) // b's refusal outlives a's by 10s
	refuse("b")
	refuse("c")
	if n := callsFor("a") + callsFor("b"); n != 0 {
		t.Fatalf("remembered keys sent %d script calls, want 0", n)
	}
	if n := callsFor("c"); n != 10 {
		t.Fatalf("a key refused with the cache full sent %d script calls for 10 refusals, want 10", n)
	}
	// a's refusal (60s) has expired, b's has not: the sweep frees one place.
	mock.Add(55 * time.Second)
	if n := callsFor("c"); n != 1 {
		t.Fatalf("once a's refusal expired, c sent %d script calls for 10 refusals, want 1 then none", n)
	}
}
