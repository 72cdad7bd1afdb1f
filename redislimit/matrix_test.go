package redislimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// TestMatrix runs the composition matrix (limitertest.RunMatrix) on the
// Redis stores: redis-server and a Redis Cluster, whose scripts are given a
// mock clock's time (WithScriptClock: a real server's TIME cannot be
// moved), and miniredis, whose own TIME the matrix moves (SetTime), so
// that there the scripts run as in production, on Redis's time. The
// in-memory store runs it in the root module's TestMatrix.
func TestMatrix(t *testing.T) {
	mini := miniredis.RunT(t)
	cl := theCluster(t)
	limitertest.RunMatrix(t,
		// The server is the one the tests run on: redis-server, or
		// valkey-server with KEYLIMIT_REDIS_SERVER (CI runs both).
		matrixStore(t, redisserver.Binary(), func(t testing.TB) redis.UniversalClient { return shared.client(t) }, nil),
		matrixStore(t, "Cluster of "+redisserver.Binary(), func(t testing.TB) redis.UniversalClient { return clusterClient(t, cl) }, nil),
		matrixStore(t, "miniredis", func(t testing.TB) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: mini.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		}, mini),
	)
}

// matrixSeq makes the matrix's prefixes unique.
var matrixSeq atomic.Int64

// matrixStore is a limitertest.Store of the Redis limiters on the clients
// newClient makes, on a mock clock; the scripts read it, or, with mini,
// miniredis's TIME, which Advance moves with it.
func matrixStore(t *testing.T, name string, newClient func(testing.TB) redis.UniversalClient, mini *miniredis.Miniredis) limitertest.Store {
	mock := newMock()
	advance := mock.Add
	opts := onMock(mock)
	if mini != nil {
		mini.SetTime(mock.Now())
		opts = []redislimit.Option{redislimit.WithClock(mock)}
		advance = func(d time.Duration) {
			mock.Add(d)
			mini.SetTime(mock.Now())
			if d > 0 {
				mini.FastForward(d) // what expires in d does
			}
		}
	}
	c := newClient(t)
	with := func(more ...redislimit.Option) []redislimit.Option {
		prefix := redislimit.WithPrefix(fmt.Sprintf("matrix%d:", matrixSeq.Add(1)))
		// Announcements on (the package's tests turn them off): the
		// default policy as it runs in production.
		return append(append([]redislimit.Option{redislimit.WithTimeout(patient), prefix, redislimit.WithFleetBeats(true)}, opts...), more...)
	}
	rate := func(c redis.UniversalClient, kind string, l keylimit.Limit, opts []redislimit.Option) (keylimit.Limiter[string], error) {
		return typeNamed(map[string]string{"bucket": "TokenBucket", "fixed": "FixedWindow", "sliding": "SlidingWindow"}[kind])(c, l, opts...)
	}
	return limitertest.Store{
		Name:    name,
		Now:     mock.Now,
		Advance: advance,
		Limiter: func(t *testing.T, kind string, l keylimit.Limit, perKey func(string) keylimit.Limit) (keylimit.Limiter[string], error) {
			lim, err := rate(c, kind, l, with())
			if err != nil || perKey == nil {
				return lim, err
			}
			return keyLimited(t, lim, perKey), nil
		},
		Leased: func(t *testing.T, kind string, l keylimit.Limit, instances int) ([]keylimit.Limiter[string], error) {
			o := with()
			var fleet []keylimit.Limiter[string]
			for i := range instances {
				oi := o
				if i < instances-1 {
					oi = append(o[:len(o):len(o)], redislimit.WithLeases(l.Period/100))
				}
				lim, err := rate(newClient(t), kind, l, oi)
				if err != nil {
					return nil, err
				}
				fleet = append(fleet, lim)
			}
			return fleet, nil
		},
		Penalty: func(t *testing.T, inner keylimit.Limiter[string], b keylimit.Ban) (keylimit.Limiter[string], error) {
			return redislimit.NewPenalty(c, "matrix", inner, b, with()...)
		},
		Concurrency: func(t *testing.T, n int) (keylimit.ConcurrencyLimiter[string], error) {
			return redislimit.NewConcurrency(c, "matrix", n, with()...)
		},
		Faults: func(t *testing.T, l keylimit.Limit) (keylimit.ContextLimiter[string], func(string), error) {
			fc := newClient(t)
			f := new(matrixFaults)
			fc.AddHook(f)
			lim, err := redislimit.NewFixedWindow(fc, "matrix", l, append(with(),
				redislimit.WithFailurePolicy(redislimit.FailClosed()), redislimit.WithFailureBackoff(l.Period/4))...)
			if err != nil {
				return nil, nil, err
			}
			return lim, func(fault string) { f.fault.Store(&fault) }, nil
		},
	}
}

// matrixFaults is a client hook that fails the calls the client makes
// while its fault is set: "timeout" fails each as a call that outlasts its
// deadline, "script error" answers it with the error a script that fails
// returns, which it has Redis run instead.
type matrixFaults struct{ fault atomic.Pointer[string] }

var _ redis.Hook = (*matrixFaults)(nil)

func (f *matrixFaults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *matrixFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f.do(ctx, []redis.Cmder{cmd}, func(cmds []redis.Cmder) error { return next(ctx, cmds[0]) })
	}
}

func (f *matrixFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f.do(ctx, cmds, func(cmds []redis.Cmder) error { return next(ctx, cmds) })
	}
}

// do runs cmds by next, or, if they call a script, fails them by the
// fault set.
func (f *matrixFaults) do(ctx context.Context, cmds []redis.Cmder, next func([]redis.Cmder) error) error {
	fault := ""
	if p := f.fault.Load(); p != nil {
		fault = *p
	}
	script := false
	for _, cmd := range cmds {
		script = script || cmd.Name() == "evalsha" || cmd.Name() == "eval"
	}
	var err error
	switch {
	case fault == "" || !script: // a connection's handshake, a SCRIPT LOAD
		return next(cmds)
	case fault == "timeout":
		// As a call that outlasts its deadline, without the wait: the
		// limiter's own timeout is a patient one, which a slow call on a
		// busy machine does not reach.
		time.Sleep(50 * time.Millisecond)
		err = context.DeadlineExceeded
	default: // "script error"
		bad := make([]redis.Cmder, len(cmds))
		for i := range bad {
			bad[i] = redis.NewCmd(ctx, "eval", "return redis.error_reply('ERR matrix: the script failed')", 0)
		}
		// next returns the error; the command does not always keep it.
		if err = next(bad); err == nil {
			err = bad[0].Err()
		}
		if err == nil {
			panic("matrix: the failing script did not fail")
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
	return err
}
