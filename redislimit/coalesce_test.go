package redislimit_test

import (
	"context"
	"sync"
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

// TestCoalescedTakesAreExact (issue 26): 64 goroutines taking at once from
// a bucket and a fixed window go partly in pipelines (the limiter keeps 4
// calls in flight and queues the rest), and every decision is still its
// own: of 64 × 40 takes on 8 keys of 100 events each, exactly 800 are
// admitted, 100 per key, and the server runs one EVALSHA per take.
func TestCoalescedTakesAreExact(t *testing.T) {
	s := newServer(t)
	for _, typ := range []string{"TokenBucket", "FixedWindow"} {
		t.Run(typ, func(t *testing.T) {
			c := s.client(t)
			hook := new(pipelineCounter)
			c.AddHook(hook)
			lim, err := typeNamed(typ)(c, keylimit.PerHour(100), redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0),
				redislimit.WithFailurePolicy(redislimit.FailClosed()))
			require.NoError(t, err)
			pinged(t, lim)
			keys := make([]string, 8)
			for i := range keys {
				keys[i] = testKey(t, string(rune('a'+i)))
			}
			before := s.commandStats(t)
			const goroutines, each = 64, 40
			var admitted [8]atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						k := (g + i) % len(keys)
						if lim.Allow(keys[k]) {
							admitted[k].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			for k := range keys {
				require.EqualValues(t, 100, admitted[k].Load(), "admitted on key %d", k)
			}
			sent := s.sentSince(t, before)
			require.Equal(t, map[string]int64{"evalsha": goroutines * each}, sent, "the server's commands")
			require.Positive(t, hook.pipelines.Load(), "pipelines sent")
			t.Logf("%s: %d pipelines of %d takes in all, of %d", typ, hook.pipelines.Load(), hook.commands.Load(), goroutines*each)
		})
	}
}
