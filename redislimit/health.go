package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEvictionPolicy is the error Ping wraps when a Redis server the limiter
// uses may evict keys that still hold state: its maxmemory is set and its
// maxmemory-policy is not noeviction. Under memory pressure it would then
// delete the state of keys in use, and their quotas would start afresh.
var ErrEvictionPolicy = errors.New("redislimit: Redis may evict the limiter's keys")

// Ping checks, once at start-up say, that the limiter can work: Redis
// answers (PING), takes its script (SCRIPT LOAD, on every node of a
// cluster), and will not evict its keys. It returns an error wrapping
// ErrEvictionPolicy if a server's maxmemory is set with a maxmemory-policy
// other than noeviction (every volatile-* and allkeys-* policy can evict the
// limiter's keys, which all have a TTL); a server that refuses CONFIG GET (a
// managed Redis may) is not held against it. Ping waits as long as ctx
// allows; it changes no state and is not in Stats.
func (l *limiter) Ping(ctx context.Context) error {
	if err := l.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: PING: %w", l.name, err)
	}
	if err := script.Load(ctx, l.client).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: loading the script: %w", l.name, err)
	}
	evict, err := l.checkPolicy(ctx)
	if err != nil {
		return fmt.Errorf("redislimit: %s: reading the eviction policy: %w", l.name, err)
	}
	l.ops.policy.Store(policyChecked)
	return evict
}

// Where the check of the eviction policy stands (ops.policy).
const (
	policyUnchecked int32 = iota
	policyChecking
	policyChecked
)

// checkPolicySoon checks the eviction policy in the background, unless a
// check has run or is running: the first successful call starts it, so that
// no decision waits for it. A check that could not reach Redis leaves it to
// a later call.
func (l *limiter) checkPolicySoon() {
	if !l.ops.policy.CompareAndSwap(policyUnchecked, policyChecking) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second))
		defer cancel()
		if _, err := l.checkPolicy(ctx); err != nil {
			l.ops.policy.CompareAndSwap(policyChecking, policyUnchecked)
			return
		}
		l.ops.policy.CompareAndSwap(policyChecking, policyChecked)
	}()
}

// checkPolicy reads maxmemory and maxmemory-policy from every server of the
// client (each node of a cluster or ring), and returns an error wrapping
// ErrEvictionPolicy for the first that may evict, having logged it once. A
// server that refuses CONFIG GET (an error reply) is logged once at Debug
// and passes. err is a failure to ask.
func (l *limiter) checkPolicy(ctx context.Context) (evict error, err error) {
	var mu sync.Mutex // protects evict, from ForEachShard's goroutines
	check := func(ctx context.Context, c redis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		var reply redis.Error
		if errors.As(err, &reply) {
			if l.ops.refused.CompareAndSwap(false, true) {
				l.logger().Debug("redislimit: Redis refused CONFIG GET, so the limiter cannot tell whether it may evict "+
					"its keys; make sure maxmemory-policy is noeviction", "limiter", l.name, "error", err.Error())
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
	if s, ok := l.client.(interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	}); ok {
		err = s.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	} else {
		err = check(ctx, l.client)
	}
	if err != nil {
		return nil, err
	}
	if evict != nil && l.ops.warned.CompareAndSwap(false, true) {
		l.logger().Warn("redislimit: Redis may evict the limiter's keys, which resets their quotas",
			"limiter", l.name, "error", evict.Error())
	}
	return evict, nil
}
