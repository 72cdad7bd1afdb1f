package benchmarks

import (
	"context"
	"sync/atomic"

	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ululelimiter "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
)

// The libraries below are keyed already: each keeps its own store of keys in
// memory. Their calls take a context and can return an error; an error is
// counted (errorCount) and taken as a refusal.

// errorCount counts the calls that failed with an error.
type errorCount struct{ n atomic.Int64 }

// Errors returns the number of calls that failed with an error.
func (e *errorCount) Errors() int64 { return e.n.Load() }

// ok is allowed, unless err is not nil: then it counts err and refuses.
func (e *errorCount) ok(allowed bool, err error) bool {
	if err != nil {
		e.n.Add(1)
		return false
	}
	return allowed
}

// sethvargo is github.com/sethvargo/go-limiter's memorystore: a map behind an
// RWMutex, a mutex per key, Tokens per Interval. A sweep every SweepInterval
// (6 h by default) deletes the keys unused for SweepMinTTL (12 h by default).
type sethvargo struct {
	errorCount
	store golimiter.Store
}

var sethvargoMemory = Contender{
	Name:   "sethvargo-memorystore",
	Kind:   Peer,
	Evicts: true,
	New: func(q Quota) (Limiter, error) {
		c := &memorystore.Config{Tokens: uint64(q.Burst), Interval: q.Period}
		if q.Sweep > 0 {
			c.SweepInterval, c.SweepMinTTL = q.Sweep, q.Period
		}
		store, err := memorystore.New(c)
		if err != nil {
			return nil, err
		}
		return &sethvargo{store: store}, nil
	},
}

func (s *sethvargo) Allow(key string) bool {
	_, _, _, ok, err := s.store.Take(context.Background(), key)
	return s.ok(ok, err)
}

func (s *sethvargo) Close() error { return s.store.Close(context.Background()) }

// ulule is github.com/ulule/limiter/v3 on its memory store: a fixed window
// per key, a counter behind an RWMutex in a sync.Map, under the key prefixed
// with "limiter:". A cleaner every CleanUpInterval (30 s by default) deletes
// the keys whose window has ended.
type ulule struct {
	errorCount
	lim *ululelimiter.Limiter
}

var ululeMemory = Contender{
	Name:   "ulule-memory",
	Kind:   Peer,
	Evicts: true,
	New: func(q Quota) (Limiter, error) {
		opts := ululelimiter.StoreOptions{Prefix: ululelimiter.DefaultPrefix, CleanUpInterval: ululelimiter.DefaultCleanUpInterval}
		if q.Sweep > 0 {
			opts.CleanUpInterval = q.Sweep
		}
		store := ululememory.NewStoreWithOptions(opts)
		return &ulule{lim: ululelimiter.New(store, ululelimiter.Rate{Period: q.Period, Limit: int64(q.Burst)})}, nil
	},
}

func (u *ulule) Allow(key string) bool {
	c, err := u.lim.Get(context.Background(), key)
	return u.ok(!c.Reached, err)
}

// throttledGCRA is github.com/throttled/throttled/v2's GCRA rate limiter on
// its memstore, a map behind an RWMutex. The store is built without a key
// cap (memstore.New(0)): with one it becomes an LRU that takes a mutex on
// every call and evicts by count, not by idleness. Without, it never forgets
// a key. It admits MaxBurst+1 at once, and gives up with an error after 10
// lost compare-and-swaps on one key.
type throttledGCRA struct {
	errorCount
	lim *throttled.GCRARateLimiterCtx
}

var throttledMemstore = Contender{
	Name: "throttled-memstore",
	Kind: Peer,
	New: func(q Quota) (Limiter, error) {
		store, err := memstore.NewCtx(0)
		if err != nil {
			return nil, err
		}
		// throttled admits MaxBurst+1 at once.
		lim, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{
			MaxRate:  throttled.PerDuration(q.Burst, q.Period),
			MaxBurst: q.Burst - 1,
		})
		if err != nil {
			return nil, err
		}
		return &throttledGCRA{lim: lim}, nil
	},
}

func (t *throttledGCRA) Allow(key string) bool {
	limited, _, err := t.lim.RateLimitCtx(context.Background(), key, 1)
	return t.ok(!limited, err)
}
