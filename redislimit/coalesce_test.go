package redislimit_test

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// pipelineCounter is a go-redis hook that counts the pipelines a client
// sends and the commands in them.
type pipelineCounter struct{ pipelines, commands atomic.Int64 }

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*pipelineCounter)(nil)

// TestCoalescedTakesAreExact (issue 26, issue 38): 64 goroutines taking at
// once from a bucket, a fixed window and a sliding log go partly in
// pipelines (the limiter keeps 4 calls in flight and queues the rest), and
// the takes of a pipeline share script calls (lua/take_batch.lua); every
// decision is still its own: of 64 × 40 takes on 8 keys of 100 events
// each, exactly 800 are admitted, 100 per key, every take reached the
// server, and it ran fewer script calls than takes.
func TestCoalescedTakesAreExact(t *testing.T) {
	s := newServer(t)
	for _, typ := range []string{"TokenBucket", "FixedWindow", "SlidingWindow"} {
		t.Run(typ, func(t *testing.T) {
			c := s.client(t)
			hook := new(pipelineCounter)
			c.AddHook(hook)
			lim, keys := hammered(t, c, typ)
			before := s.commandStats(t)
			const goroutines, each = 64, 40
			for k, n := range admittedPerKey(lim, keys, goroutines, each) {
				require.EqualValues(t, 100, n, "admitted on key %d", k)
			}
			st := lim.(interface{ Stats() keylimit.Stats }).Stats()
			require.EqualValues(t, goroutines*each, st.Calls, "takes that reached the server")
			require.Zero(t, st.Errors+st.Fallbacks, "errors and decisions of the failure policy")
			sent := s.sentSince(t, before)
			require.Equal(t, []string{"evalsha"}, slices.Collect(maps.Keys(sent)), "the server's commands")
			require.Less(t, sent["evalsha"], int64(goroutines*each), "script calls")
			require.Positive(t, hook.pipelines.Load(), "pipelines sent")
			t.Logf("%s: %d script calls for %d takes, %d pipelines of %d calls", typ, sent["evalsha"], goroutines*each,
				hook.pipelines.Load(), hook.commands.Load())
		})
	}
}

// TestCoalescedTakesAfterScriptFlush (issue 38): a server that lost its
// scripts (SCRIPT FLUSH, a restart, a failover) answers a shared call
// NOSCRIPT; the call is made again by EVAL, and every take in it is
// decided once: 64 goroutines, 8 keys of 100 events, exactly 100 admitted
// on each, no error, and the server ran EVAL at least once.
func TestCoalescedTakesAfterScriptFlush(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	for _, typ := range []string{"TokenBucket", "FixedWindow", "SlidingWindow"} {
		t.Run(typ, func(t *testing.T) {
			lim, keys := hammered(t, c, typ)
			require.NoError(t, c.ScriptFlush(context.Background()).Err(), "SCRIPT FLUSH")
			before := s.commandStats(t)
			for k, n := range admittedPerKey(lim, keys, 64, 40) {
				require.EqualValues(t, 100, n, "admitted on key %d", k)
			}
			st := lim.(interface{ Stats() keylimit.Stats }).Stats()
			require.Zero(t, st.Errors+st.Fallbacks, "errors and decisions of the failure policy")
			sent := s.sentSince(t, before)
			require.Positive(t, sent["eval"], "EVALs that loaded a script again, in %v", sent)
		})
	}
}

// hammered returns a limiter of type typ on c, 100 events an hour, whose
// every decision is Redis's (no deny cache, FailClosed), pinged, and 8 keys
// for it.
func hammered(t *testing.T, c *redis.Client, typ string) (keylimit.Limiter[string], []string) {
	lim, err := typeNamed(typ)(c, keylimit.PerHour(100), redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0),
		redislimit.WithFailurePolicy(redislimit.FailClosed()))
	require.NoError(t, err)
	pinged(t, lim)
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = testKey(t, string(rune('a'+i)))
	}
	return lim, keys
}
