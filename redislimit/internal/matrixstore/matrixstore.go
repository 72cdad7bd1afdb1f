// Package matrixstore is the composition matrix's store of the Redis
// limiters (a limitertest.Harness), for the matrix's runs on Redis:
// redislimit's TestMatrix (redis-server and a Redis Cluster) and the
// fleet demo module's (miniredis). That one runs in a module of its own so
// that redislimit's test binary does not compile miniredis and its Lua.
package matrixstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// patient is the limiters' timeout: a busy machine's slow call is not an
// outage.
const patient = 10 * time.Second

// seq makes the matrix's prefixes unique.
var seq atomic.Int64

// Clock is the time of a store: the mock the limiters read, and Advance,
// which moves it and whatever time the scripts read with it (mock.Add,
// or that and a miniredis's TIME).
type Clock struct {
	Mock    *clock.Mock
	Advance func(d time.Duration)
}

// New returns the store named name of the Redis limiters on the clients
// newClient makes (a limiter on one, the instances of a leased fleet one
// each), on clk, with opts (the clock options: the scripts' time).
func New(t *testing.T, name string, clk Clock, newClient func(testing.TB) redis.UniversalClient, opts ...redislimit.Option) limitertest.Harness {
	c := newClient(t)
	with := func(more ...redislimit.Option) []redislimit.Option {
		prefix := redislimit.WithPrefix(fmt.Sprintf("matrix%d:", seq.Add(1)))
		return append(append([]redislimit.Option{redislimit.WithTimeout(patient), prefix}, opts...), more...)
	}
	return limitertest.Harness{
		Name:    name,
		Now:     clk.Mock.Now,
		Advance: clk.Advance,
		Limiter: func(t *testing.T, kind string, l keylimit.Limit, perKey func(string) keylimit.Limit) (keylimit.Limiter[string], error) {
			lim, err := rate(c, kind, l, with())
			if err != nil || perKey == nil {
				return lim, err
			}
			// As a user does right after the constructor.
			return lim, lim.(interface {
				SetKeyLimit(func(key string) keylimit.Limit) error
			}).SetKeyLimit(perKey)
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
		Concurrency: func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error) {
			return redislimit.NewConcurrency(c, "matrix", n, with(keylimit.WithMaxHold(maxHold))...)
		},
		Faults: func(t *testing.T, l keylimit.Limit) (keylimit.ContextLimiter[string], func(string), error) {
			fc := newClient(t)
			f := new(faults)
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

// rate returns a new Redis rate limiter of kind ("bucket", "fixed" or
// "sliding") under l, or a nil interface and the constructor's error.
func rate(c redis.UniversalClient, kind string, l keylimit.Limit, opts []redislimit.Option) (keylimit.Limiter[string], error) {
	var lim keylimit.Limiter[string]
	var err error
	switch kind {
	case "bucket":
		lim, err = redislimit.NewTokenBucket(c, "test", l, opts...)
	case "fixed":
		lim, err = redislimit.NewFixedWindow(c, "test", l, opts...)
	case "sliding":
		lim, err = redislimit.NewSlidingWindow(c, "test", l, opts...)
	default:
		panic("matrixstore: no Redis limiter of kind " + kind)
	}
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return lim, nil
}

// faults is a client hook that fails the calls the client makes while its
// fault is set: "timeout" fails each as a call that outlasts its deadline,
// "script error" answers it with the error a script that fails returns,
// which it has Redis run instead.
type faults struct{ fault atomic.Pointer[string] }

var _ redis.Hook = (*faults)(nil)

func (f *faults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f.do(ctx, []redis.Cmder{cmd}, func(cmds []redis.Cmder) error { return next(ctx, cmds[0]) })
	}
}

func (f *faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f.do(ctx, cmds, func(cmds []redis.Cmder) error { return next(ctx, cmds) })
	}
}

// do runs cmds by next, or, if they call a script, fails them by the
// fault set.
func (f *faults) do(ctx context.Context, cmds []redis.Cmder, next func([]redis.Cmder) error) error {
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
