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

// ErrNoPersistence is the error Ping wraps when a Redis server the limiter
// uses keeps nothing on disk (save "" and appendonly no): a restart of it
// forgets every limiter key, and every quota starts afresh. See the package
// doc, "What Redis must be".
var ErrNoPersistence = errors.New("redislimit: Redis keeps the limiter's keys in memory only")

// Redis's health as a limiter sees it: the outcome of every round trip
// (counted; an outage started or ended, logged by log.go), and the checks of
// the server (Ping, and once in the background: the eviction policy and
// persistence).

// counted counts a round trip that returned err, in Stats.
func (o *ops) counted(err error) {
	o.counts.calls.Add(1)
	switch {
	case errors.Is(err, ErrScript):
		o.counts.scriptErrors.Add(1)
	case err != nil:
		o.counts.errors.Add(1)
	}
}

// called follows Redis's health after a round trip made at local time now
// that returned err: a failure, unless it was the caller's or one key's,
// starts an outage (a script error is logged as what it is); a success ends
// the outage, and the first one starts the checks of the server. (counted
// counts it.)
func (o *ops) called(ctx context.Context, err error, now int64) {
	if err == nil {
		if o.failing.Load() {
			o.outageEnded(now)
		}
		if o.evict.Load() == policyUnchecked {
			o.checkPolicySoon()
		}
		return
	}
	if errors.Is(err, ErrScript) {
		o.scriptFailed(err, now)
		return
	}
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

// ping is Ping: PING, SCRIPT LOAD of the full script, of the plain one
// (o.take) and of its batch (batchOf), and the checks of the server.
func (o *ops) ping(ctx context.Context) error {
	if err := o.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redislimit: %s: PING: %w", o.name, err)
	}
	for _, sc := range []*redis.Script{script, o.take, batchOf[o.take]} {
		if sc == nil {
			continue
		}
		if err := sc.Load(ctx, o.client).Err(); err != nil {
			return fmt.Errorf("redislimit: %s: loading the script: %w", o.name, err)
		}
	}
	risks, err := o.checkServers(ctx)
	if err != nil {
		return fmt.Errorf("redislimit: %s: reading the server's configuration: %w", o.name, err)
	}
	o.evict.Store(policyChecked)
	return risks
}

// Where the checks of the server stand (ops.evict).
const (
	policyUnchecked int32 = iota
	policyChecking
	policyChecked
)

// checkPolicySoon checks the servers in the background, unless a check has
// run or is running: the first successful call starts it, so that no
// decision waits for it. A check that could not reach Redis leaves it to a
// later call; after closeChecks it starts none. The check waits for Redis
// at least a second (CONFIG GET of every node is slower than a decision)
// and at most checkTimeout, which bounds what closeChecks may wait.
func (o *ops) checkPolicySoon() {
	if !o.evict.CompareAndSwap(policyUnchecked, policyChecking) {
		return
	}
	o.checkMu.Lock()
	defer o.checkMu.Unlock()
	if o.closed {
		return // evict stays "checking": no call starts one again
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(max(o.timeout, time.Second), checkTimeout))
	o.stopCheck = cancel
	o.checking.Go(func() {
		defer cancel()
		if _, err := o.checkServers(ctx); err != nil {
			o.evict.CompareAndSwap(policyChecking, policyUnchecked)
			return
		}
		o.evict.CompareAndSwap(policyChecking, policyChecked)
	})
}

// checkTimeout is the longest a background check waits for Redis.
const checkTimeout = 5 * time.Second

// closeChecks cancels the background check under way, if one is, and waits
// for it to end: after it, o runs no goroutine and starts none. A check
// blocked on a server that does not answer ends at its timeout (go-redis
// reads until the context's deadline, not its cancellation).
func (o *ops) closeChecks() {
	o.checkMu.Lock()
	o.closed = true
	if o.stopCheck != nil {
		o.stopCheck()
	}
	o.checkMu.Unlock()
	o.checking.Wait()
}

// checkServers reads, from every server of the client (each node of a
// cluster or ring), in one round trip each, what can reset the limiter's
// quotas: maxmemory and maxmemory-policy (a server that may evict), save
// and appendonly (one that keeps nothing on disk). It returns an error
// wrapping ErrEvictionPolicy, ErrNoPersistence or both for the first
// servers found so, having logged each once. A server that refuses CONFIG
// GET (an error reply) is logged once at Debug and passes. err is a
// failure to ask.
func (o *ops) checkServers(ctx context.Context) (risks error, err error) {
	var mu sync.Mutex // protects evict and disk, from ForEachShard's goroutines
	var evict, disk error
	check := func(ctx context.Context, c redis.UniversalClient) error {
		var memory, save, aof *redis.MapStringStringCmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			memory, save, aof = p.ConfigGet(ctx, "maxmemory*"), p.ConfigGet(ctx, "save"), p.ConfigGet(ctx, "appendonly")
			return nil
		})
		var reply redis.Error
		if errors.As(err, &reply) {
			if o.refused.CompareAndSwap(false, true) {
				o.log().Debug("redislimit: Redis refused CONFIG GET, so the limiter cannot tell whether it may evict "+
					"its keys or forget them at a restart; make sure maxmemory-policy is noeviction, and that it keeps "+
					"its data on disk (appendonly yes)", "limiter", o.name, "error", err.Error())
			}
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if e := evictionRisk(memory.Val()); e != nil && evict == nil {
			evict = e
		}
		if e := persistenceRisk(save.Val(), aof.Val()); e != nil && disk == nil {
			disk = e
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
	if disk != nil && o.warnedDisk.CompareAndSwap(false, true) {
		o.log().Warn("redislimit: Redis keeps the limiter's keys in memory only: a restart resets every quota",
			"limiter", o.name, "error", disk.Error())
	}
	return errors.Join(evict, disk), nil
}

// evictionRisk returns an error wrapping ErrEvictionPolicy if a server whose
// CONFIG GET maxmemory* is cfg may evict keys: maxmemory set, and a policy
// other than noeviction.
func evictionRisk(cfg map[string]string) error {
	policy, maxmemory := cfg["maxmemory-policy"], cfg["maxmemory"]
	if policy == "" || policy == "noeviction" || maxmemory == "" || maxmemory == "0" {
		return nil
	}
	return fmt.Errorf("%w: maxmemory is %s bytes with maxmemory-policy %s, which deletes keys under memory pressure, "+
		"and a deleted key's quota starts afresh; set maxmemory-policy noeviction", ErrEvictionPolicy, maxmemory, policy)
}

// persistenceRisk returns an error wrapping ErrNoPersistence if a server
// whose CONFIG GET save and appendonly are save and aof keeps nothing on
// disk: no RDB snapshots (save "") and no append-only file. A reply
// without the parameter (a server that does not have it) passes.
func persistenceRisk(save, aof map[string]string) error {
	snapshots, ok1 := save["save"]
	appendOnly, ok2 := aof["appendonly"]
	if !ok1 || !ok2 || snapshots != "" || appendOnly != "no" {
		return nil
	}
	return fmt.Errorf("%w: save is \"\" and appendonly is no, so a restart of the server forgets every key, and "+
		"every quota starts afresh (as after a FLUSHALL); set appendonly yes, or keep a replica that takes over "+
		"(Sentinel, Cluster) before the master restarts", ErrNoPersistence)
}
