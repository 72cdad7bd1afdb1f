package redislimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The caller's context, end to end: a request whose context has ended makes
// no Redis call, and the client sees the caller's context (its values, for
// tracing) on every call made under one.

// contextMethods are the methods of a limiter that take a context; the
// Redis limiters and their joined limiter have them all.
type contextMethods interface {
	redisLimiter
	PeekContext(ctx context.Context, key string) (keylimit.Result, error)
}

// contextLimiters returns a limiter of each type, and the joined limiter of
// all three, on c.
func contextLimiters(t *testing.T, c redis.UniversalClient, opts ...redislimit.Option) map[string]contextMethods {
	lims := map[string]contextMethods{}
	var all []keylimit.Limiter[string]
	for _, typ := range types {
		lim, err := typ.new(c, keylimit.PerHour(10), append(opts, redislimit.WithTimeout(patient),
			redislimit.WithPrefix(testKey(t, typ.name)+":"))...)
		require.NoError(t, err)
		pinged(t, lim) // the eviction check, in the background under its own context, is done
		lims[typ.name] = lim.(contextMethods)
		all = append(all, lim)
	}
	lims["joined"] = keylimit.All(all...).(contextMethods)
	return lims
}

// TestEndedContextMakesNoCall: with a context already cancelled, or past its
// deadline, every method that takes one returns at once with the
// context's error and asks the client nothing (a client hook sees no
// command), so Redis runs nothing (INFO commandstats); a take is refused.
// The deny cache is off, so that nothing else answers.
func TestEndedContextMakesNoCall(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	hook := new(ctxHook)
	c.AddHook(hook)
	lims := contextLimiters(t, c, redislimit.WithDenyCacheSize(0))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for name, lim := range lims {
		key := testKey(t, "k")
		_, adm := lim.Admit(key, 1) // the connection is made, the script loaded
		for _, ctx := range []context.Context{cancelled, expired} {
			before := s.commandStats(t)
			hook.take()
			r, err := lim.TakeContext(ctx, key, 1)
			require.ErrorIs(t, err, ctx.Err(), "%s: TakeContext", name)
			require.False(t, r.Allowed, "%s: TakeContext: %v", name, r)
			_, a, err := lim.AdmitContext(ctx, key, 1)
			require.ErrorIs(t, err, ctx.Err(), "%s: AdmitContext", name)
			require.Zero(t, a.N, "%s: AdmitContext's Admission", name)
			_, err = lim.PeekContext(ctx, key)
			require.ErrorIs(t, err, ctx.Err(), "%s: PeekContext", name)
			require.ErrorIs(t, lim.RefundContext(ctx, key, adm), ctx.Err(), "%s: RefundContext", name)
			if each, ok := lim.(interface {
				TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
			}); ok {
				_, err = each.TakeEach(ctx, key, 1, make([]keylimit.Result, 3))
				require.ErrorIs(t, err, ctx.Err(), "%s: TakeEach", name)
			}
			err = keylimit.WaitN(ctx, lim, key, 1)
			require.ErrorIs(t, err, ctx.Err(), "%s: keylimit.WaitN", name)
			require.Empty(t, hook.take(), "%s: the commands the client was asked to send", name)
			require.Equal(t, before, s.commandStats(t), "%s: the commands Redis ran", name)
		}
		require.Equal(t, 9, lim.Peek(key).Remaining, "%s: what the ended contexts took", name)
	}
}

// ctxKey is the key of the value TestContextReachesTheClient puts in a
// context.
type ctxKey struct{}

// ctxHook records the value of ctxKey in the context of each command the
// client processes, and of each pipeline.
type ctxHook struct {
	mu   sync.Mutex
	seen []any
}

func (h *ctxHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ctxHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.seen = append(h.seen, ctx.Value(ctxKey{}))
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *ctxHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns what the hook has seen since the last call.
func (h *ctxHook) take() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := h.seen
	h.seen = nil
	return seen
}

// TestContextReachesTheClient: every command a method with a context sends
// is processed under that context (a client hook, as redisotel's tracing
// is, sees its values), for a context with values only and for one that
// can be cancelled. Under a cancelled context no command is sent at all.
func TestContextReachesTheClient(t *testing.T) {
	c := shared.client(t)
	hook := new(ctxHook)
	c.AddHook(hook)
	lims := contextLimiters(t, c, redislimit.WithDenyCacheSize(0))
	values := context.WithValue(context.Background(), ctxKey{}, "values")
	cancellable, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "cancellable"))
	defer cancel()
	for name, lim := range lims {
		key := testKey(t, "k")
		for _, ctx := range []context.Context{values, cancellable} {
			want := ctx.Value(ctxKey{})
			hook.take()
			_, adm, err := lim.AdmitContext(ctx, key, 1)
			require.NoError(t, err, name)
			_, err = lim.TakeContext(ctx, key, 1)
			require.NoError(t, err, name)
			_, err = lim.PeekContext(ctx, key)
			require.NoError(t, err, name)
			require.NoError(t, lim.RefundContext(ctx, key, adm), name)
			require.NoError(t, keylimit.WaitN(ctx, lim, key, 1), name)
			if each, ok := lim.(interface {
				TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
			}); ok {
				_, err = each.TakeEach(ctx, key, 1, make([]keylimit.Result, 3))
				require.NoError(t, err, name)
			}
			seen := hook.take()
			require.NotEmpty(t, seen, name)
			for i, v := range seen {
				require.Equal(t, want, v, "%s: command %d of %d: the context's value", name, i, len(seen))
			}
		}
	}
}
