package redislimit_test

import (
	"context"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// TestOneScriptCallPerDecision: a decision is one EVALSHA and nothing else
// (after the first call on a new server, which loads the script by EVAL).
// Commandstats counts the commands a script runs too; those are set aside.
func TestOneScriptCallPerDecision(t *testing.T) {
	s := newServer(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(s.client(t), keylimit.PerHour(1000),
				redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
			if err != nil {
				t.Fatal(err)
			}
			pinged(t, lim)
			lim.Allow(testKey(t, "warm")) // the connection is made and the script loaded
			before := s.commandStats(t)
			const calls = 50
			for i := range calls {
				key := testKey(t, "k")
				if i%2 == 0 {
					lim.Take(key, 1+i%3)
				} else {
					lim.Peek(key)
				}
			}
			if sent := s.sentSince(t, before); len(sent) != 1 || sent["evalsha"] != calls {
				t.Fatalf("%d decisions sent %v, want evalsha: %d and nothing else", calls, sent, calls)
			}
		})
	}
}

// TestScriptReloadedAfterFlush: when the server has forgotten the script
// (SCRIPT FLUSH, a restart, a failover), the EVALSHA fails with NOSCRIPT and
// the same decision is made by one EVAL, which loads it again; the next
// decision is one EVALSHA again.
func TestScriptReloadedAfterFlush(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(c, keylimit.PerHour(2), redislimit.WithTimeout(patient))
			if err != nil {
				t.Fatal(err)
			}
			pinged(t, lim)
			key := testKey(t, "k")
			lim.Allow(key)
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			before := s.commandStats(t)
			if r := lim.Take(key, 1); !r.Allowed || r.Remaining != 0 {
				t.Fatalf("the decision after SCRIPT FLUSH: %+v, want allowed with Remaining 0", r)
			}
			if sent := s.sentSince(t, before); len(sent) != 2 || sent["evalsha"] != 1 || sent["eval"] != 1 {
				t.Fatalf("the decision after SCRIPT FLUSH sent %v, want evalsha: 1 (NOSCRIPT) and eval: 1", sent)
			}
			before = s.commandStats(t)
			lim.Peek(key)
			if sent := s.sentSince(t, before); len(sent) != 1 || sent["evalsha"] != 1 {
				t.Fatalf("the next decision sent %v, want evalsha: 1", sent)
			}
		})
	}
}
