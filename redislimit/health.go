package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is the error Ping wraps when a Redis server the limiter
// uses may evict keys that still hold state: its maxmemory is set and its
// maxmemory-policy is not noeviction. Under memory pressure it would then
// delete the state of keys in use, and their quotas would start afresh.
var ErrEvictionPolicy = errors.New("redislimit: Redis may evict the limiter's keys")

// Redis's health as a limiter sees it: the outcome of every round trip
// (counted; an outage started or ended, logged by log.go), and the checks of
// the server (Ping, and the eviction policy once).

// called counts a round trip made at local time now that returned err, and
// follows Redis's health: a failure, unless it was the caller's or one
// key's, starts an outage; a success ends the outage, and the first one
// starts the check of the eviction policy.
func (o *ops) called(ctx context.Context, err error, now int64) {
	o.counts.calls.Add(1)
	if err == nil {
		if o.failing.Load() {
			o.outageEnded(now)
		}
		if o.evict.Load() == policyUnchecked {
			o.checkPolicySoon()
		}
		return
	}
	o.counts.errors.Add(1)
	if !o.failing.Load() && isOutage(ctx, err) {
		o.outageStarted(err, now)
	}
}

// isOutage reports whether err, a failure of a call under the caller's ctx,
// says Redis cannot decide: not when the caller's own context ended, nor
// for a WRONGTYPE reply (one key holds another type's value), which other
// keys do not share.
func isOutage(ctx context.Context, err error) bool {
	var reply redis.Error
	if ctx.Err() != nil || errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE") {
		return false
	}
	return true
}

// ping is Ping: PING, SCRIPT LOAD, and the check of the eviction policy.
func (o *ops) ping(ctx context.Context) error {
	if err := o.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: PING: %w", o.name, err)
	}
	if err := script.Load(ctx, o.client).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: loading the script: %w", o.name, err)
	}
	evict, err := o.checkPolicy(ctx)
	if err != nil {
		return fmt.Errorf("redislimit: %s: reading the eviction policy: %w", o.name, err)
	}
	o.evict.Store(policyChecked)
	return evict
}

// Where the check of the eviction policy stands (ops.evict).
const (
	policyUnchecked int32 = iota
	policyChecking
	policyChecked
)

// checkPolicySoon checks the eviction policy in the background, unless a
// check has run or is running: the first successful call starts it, so that
// no decision waits for it. A check that could not reach Redis leaves it to
// a later call.
func (o *ops) checkPolicySoon() {
	if !o.evict.CompareAndSwap(policyUnchecked, policyChecking) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(o.timeout, time.Second))
		defer cancel()
		if _, err := o.checkPolicy(ctx); err != nil {
			o.evict.CompareAndSwap(policyChecking, policyUnchecked)
			return
		}
		o.evict.CompareAndSwap(policyChecking, policyChecked)
	}()
}

// checkPolicy reads maxmemory and maxmemory-policy from every server of the
// client (each node of a cluster or ring), and returns an error wrapping
// ErrEvictionPolicy for the first that may evict, having logged it once. A
// server that refuses CONFIG GET (an error reply) is logged once at Debug
// and passes. err is a failure to ask.
func (o *ops) checkPolicy(ctx context.Context) (evict error, err error) {
	var mu sync.Mutex // protects evict, from ForEachShard's goroutines
	check := func(ctx context.Context, c redis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		var reply redis.Error
		if errors.As(err, &reply) {
			if o.refused.CompareAndSwap(false, true) {
				o.log().Debug("redislimit: Redis refused CONFIG GET, so the limiter cannot tell whether it may evict "+
					"its keys; make sure maxmemory-policy is noeviction", "limiter", o.name, "error", err.Error())
			}
			return nil
		}
		if err != nil {
			return err
		}
		policy, maxmemory := cfg["maxmemory-policy"], cfg["maxmemory"]
		if policy == "" || policy == "noeviction" || maxmemory == "" || maxmemory == "0" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if evict == nil {
			evict = fmt.Errorf("%w: maxmemory is %s bytes with maxmemory-policy %s, which deletes keys under memory pressure, "+
				"and a deleted key's quota starts afresh; set maxmemory-policy noeviction", ErrEvictionPolicy, maxmemory, policy)
		}
		return nil
	}
	if s, ok := o.client.(interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	}); ok {
		err = s.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	} else {
		err = check(ctx, o.client)
	}
	if err != nil {
		return nil, err
	}
	if evict != nil && o.warned.CompareAndSwap(false, true) {
		o.log().Warn("redislimit: Redis may evict the limiter's keys, which resets their quotas",
			"limiter", o.name, "error", evict.Error())
	}
	return evict, nil
}
