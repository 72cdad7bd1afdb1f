package redislimit_test

import (
	"context"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
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
			require.NoError(t, err, "new limiter")
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
			require.Equal(t, map[string]int64{"evalsha": calls}, s.sentSince(t, before), "commands %d decisions sent", calls)
		})
	}
}

// TestScriptReloadedAfterFlush: when the server has forgotten the script
// (SCRIPT FLUSH, a restart, a failover), the EVALSHA fails with NOSCRIPT and
// the same decision is made by one EVAL, which loads it again; the next
// decision of the same script is one EVALSHA again. (A plain take and a
// peek run different scripts: each is loaded again by its first call.)
func TestScriptReloadedAfterFlush(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			lim, err := typ.new(c, keylimit.PerHour(2), redislimit.WithTimeout(patient))
			require.NoError(t, err, "new limiter")
			pinged(t, lim)
			key := testKey(t, "k")
			lim.Allow(key)
			require.NoError(t, c.ScriptFlush(context.Background()).Err(), "SCRIPT FLUSH")
			before := s.commandStats(t)
			r := lim.Take(key, 1)
			require.True(t, r.Allowed, "the decision after SCRIPT FLUSH: allowed, in %+v", r)
			require.Zero(t, r.Remaining, "the decision after SCRIPT FLUSH: Remaining, in %+v", r)
			require.Equal(t, map[string]int64{"evalsha": 1, "eval": 1}, s.sentSince(t, before),
				"commands the decision after SCRIPT FLUSH sent: evalsha (NOSCRIPT), then eval")
			before = s.commandStats(t)
			lim.Take(key, 1)
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "commands the next take sent")
			other := testKey(t, "other") // key is refused now, which the deny cache answers
			lim.Peek(other)
			before = s.commandStats(t)
			lim.Peek(other)
			require.Equal(t, map[string]int64{"evalsha": 1}, s.sentSince(t, before), "commands the next peek sent")
		})
	}
}
