package redislimit_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
)

// stallHook makes a client's script calls outlast their deadline, as a
// Redis that stalls (or a busy host) would: all of them while on is set,
// and otherwise each with probability p. Each waits until its context
// ends, then fails with the context's error, without sending anything.
type stallHook struct {
	on    atomic.Bool
	oneIn atomic.Int64 // > 0: each call stalls with probability 1/oneIn
}

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) stall(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if c.Name() == "evalsha" || c.Name() == "eval" {
			k := h.oneIn.Load()
			return h.on.Load() || (k > 0 && rand.Int64N(k) == 0)
		}
	}
	return false
}

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.stall(cmd) {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.stall(cmds...) {
			<-ctx.Done()
			for _, c := range cmds {
				c.SetErr(ctx.Err())
			}
			return ctx.Err()
		}
		return next(ctx, cmds)
	}
}

// BenchmarkFleetOutage (issue 39): 100 instances, each a TokenBucket on a
// client of its own and one goroutine asking for one hot key without pause
// (sleeping for RetryAfter when refused), limited to 10,000/s with a burst
// of 100, under the default failure policy (the live fleet's size) and,
// for comparison, FailLocal(1) (the default before). After a warm-up of
// 2.5 s with Redis answering (the instances learn the fleet's size), 3 s
// are measured, in which Redis stalls:
//
//   - outage: every script call of every instance, for the middle second
//     (each outlasts the 100 ms timeout);
//   - sporadic: each script call with probability 1/2000, all along (each
//     timeout leaves its instance to the policy for the 1 s backoff).
//
// It reports admitted/bound, the events the fleet admitted over the bound
// of one Redis bucket over the measured time (burst + rate × elapsed, on
// Redis's clock), the timeouts, the decisions the failure policy made, and
// the smallest fleet's size an instance knew as the measure began (0: it
// learns none).
// One run is one iteration:
//
//	go test -run '^$' -bench FleetOutage -benchtime 1x ./redislimit
func BenchmarkFleetOutage(b *testing.B) {
	const instances = 100
	limit := keylimit.PerSecond(10_000).WithBurst(100)
	for _, pol := range []struct {
		name string
		opt  redislimit.Option
	}{
		{"default", redislimit.WithFleetBeats(true)},
		{"FailLocal(1)", redislimit.WithFailurePolicy(redislimit.FailLocal(1))},
	} {
		for _, mode := range []string{"outage", "sporadic"} {
			b.Run(pol.name+"/"+mode, func(b *testing.B) {
				for b.Loop() {
					r := fleetOutage(b, instances, limit, pol.opt, mode)
					b.ReportMetric(r.ratio, "admitted/bound")
					b.ReportMetric(float64(r.timeouts), "timeouts")
					b.ReportMetric(float64(r.fallbacks), "fallbacks")
					b.ReportMetric(float64(r.minSize), "min-fleet-size")
				}
			})
		}
	}
}

type outageResult struct {
	ratio               float64
	timeouts, fallbacks uint64
	minSize             int
}

// fleetOutage runs one BenchmarkFleetOutage scenario.
func fleetOutage(b *testing.B, n int, limit keylimit.Limit, opt redislimit.Option, mode string) outageResult {
	warm, run := 2500*time.Millisecond, 3*time.Second
	if testing.Short() { // CI runs every benchmark once, to see that it runs
		warm, run = 300*time.Millisecond, 600*time.Millisecond
	}
	s := newServer(b)
	timeClient := s.client(b)
	quiet := keylimit.WithLogger(slog.New(slog.DiscardHandler))
	prefix := redislimit.WithPrefix(testKey(b, "outage") + ":")
	fleet := make([]*redislimit.TokenBucket, n)
	hooks := make([]*stallHook, n)
	for i := range fleet {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, PoolSize: 2})
		b.Cleanup(func() { c.Close() })
		if err := c.Ping(b.Context()).Err(); err != nil {
			b.Fatal(err)
		}
		hooks[i] = new(stallHook)
		c.AddHook(hooks[i])
		lim, err := redislimit.NewTokenBucket(c, "outage", limit, prefix, quiet, opt)
		if err != nil {
			b.Fatal(err)
		}
		fleet[i] = lim
	}
	var counting atomic.Bool
	var admitted atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, lim := range fleet {
		wg.Go(func() {
			for !stop.Load() {
				r := lim.Take("hot", 1)
				switch {
				case r.Allowed:
					if counting.Load() {
						admitted.Add(1)
					}
				case r.RetryAfter > 0:
					time.Sleep(min(r.RetryAfter, 100*time.Millisecond))
				}
			}
		})
	}
	time.Sleep(warm)
	before := make([]keylimit.Stats, n)
	minSize := n
	for i, lim := range fleet {
		before[i] = lim.Stats()
		minSize = min(minSize, redislimit.FleetSize(lim)) // 0: it learns none
	}
	start := redisTime(b, timeClient)
	counting.Store(true)
	switch mode {
	case "outage":
		time.Sleep(run / 3)
		for _, h := range hooks {
			h.on.Store(true)
		}
		time.Sleep(run / 3)
		for _, h := range hooks {
			h.on.Store(false)
		}
		time.Sleep(run / 3)
	case "sporadic":
		for _, h := range hooks {
			h.oneIn.Store(2000)
		}
		time.Sleep(run)
	}
	counting.Store(false)
	end := redisTime(b, timeClient)
	stop.Store(true)
	wg.Wait()
	var res outageResult
	res.minSize = minSize
	for i, lim := range fleet {
		st := lim.Stats()
		res.timeouts += st.Errors - before[i].Errors
		res.fallbacks += st.Fallbacks - before[i].Fallbacks
		lim.Close()
	}
	bound := int64(limit.BurstSize()) + (end-start)/int64(limit.WithBurst(1).FillTime())
	res.ratio = float64(admitted.Load()) / float64(bound)
	return res
}
