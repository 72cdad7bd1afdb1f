package redislimit

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/penalty_ban.lua
var penaltyBanLua string

// penaltyBanScript answers how long a key's ban has left on Redis
// (lua/penalty_ban.lua).
var penaltyBanScript = redis.NewScript(penaltyBanLua)

// The most keys, and key bytes, that wait to be checked with Redis: what
// a flood of announcements can make an instance hold, whatever is
// published.
const (
	maxHints     = 1024
	maxHintBytes = 1 << 20
)

// banHints are the keys the announcements named, waiting for a Penalty's store to
// ask Redis about their bans. An announcement is only a hint: a channel is
// anyone's to publish on, from any database, so an instance bans a key only
// for as long as Redis says its ban has left (see redisBans.check), never
// for a length a message gives, and with the limit its own limiter reports
// for the key, never one a message gives. A key named again while it
// waits is queued once; an announcement that finds the queue full is
// dropped, so memory is bounded and the checks are one round trip at a
// time. An instance that drops a real announcement learns the ban, as one
// that missed it does, at its limiter's first refusal.
type banHints struct {
	mu      sync.Mutex // protects keys, queued and bytes
	keys    []string   // in the order heard
	queued  map[string]struct{}
	bytes   int           // the lengths of keys' keys, at most maxHintBytes
	wake    chan struct{} // holds a token while keys may be non-empty
	dropped atomic.Uint64 // announcements dropped, the queue full
}

func (h *banHints) init() {
	h.queued = map[string]struct{}{}
	h.wake = make(chan struct{}, 1)
}

// add queues key, unless it is queued already, or there is no room.
func (h *banHints) add(key string) {
	h.mu.Lock()
	if _, ok := h.queued[key]; !ok {
		if len(h.keys) >= maxHints || h.bytes+len(key) > maxHintBytes {
			h.mu.Unlock()
			h.dropped.Add(1)
			return
		}
		// The key is a substring of the message: cloned, so that a long
		// message is not held for a short key.
		key = strings.Clone(key)
		h.queued[key] = struct{}{}
		h.keys = append(h.keys, key)
		h.bytes += len(key)
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take returns the keys queued, in the order heard, and empties the queue:
// a key named again from now on is queued again, for a ban that may have
// changed since.
func (h *banHints) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := h.keys
	h.keys, h.bytes = nil, 0
	clear(h.queued)
	return keys
}

// parseHint reads an announcement, "length limit instance key" (the
// length in µs, 0 when a ban was lifted; the key may hold spaces), or
// reports false. The length and the limit are checked for their form, and
// not returned: neither is believed (see banHints).
func parseHint(payload string) (origin, key string, ok bool) {
	f := strings.SplitN(payload, " ", 4)
	if len(f) != 4 {
		return "", "", false
	}
	us, err1 := strconv.ParseInt(f[0], 10, 64)
	limit, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || us < 0 || limit < 0 {
		return "", "", false
	}
	return f[2], f[3], true
}

// hear queues the keys Redis's announcements name, until ch is closed.
func (p *redisBans) hear(ch <-chan *redis.Message) {
	defer p.done.Done()
	for msg := range ch {
		origin, key, ok := parseHint(msg.Payload)
		if !ok || origin == p.id {
			continue // not an announcement, or this instance's own
		}
		p.hints.add(key)
	}
}

// checkHints asks Redis about the keys the announcements name, one at a
// time, until ctx ends.
func (p *redisBans) checkHints(ctx context.Context) {
	defer p.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.hints.wake:
		}
		for _, key := range p.hints.take() {
			if ctx.Err() != nil {
				return
			}
			p.check(ctx, key)
		}
	}
}

// check asks Redis how long key's ban has left, and knows it for that
// long, at most Ban.For, with the limit the penalty's limiter reports for
// key (its Peek); it forgets a ban of key it knows that Redis does not
// hold (a Reset, on another instance). A failed call, or Peek, changes
// nothing: the instance learns the ban, as one that missed the
// announcement does, at its limiter's first refusal.
func (p *redisBans) check(ctx context.Context, key string) {
	// now is read before the call, as Refused reads it: the ban remembered
	// ends no later than Redis's.
	now, mono := p.clock.now(), p.known.monoNow()
	c, tctx, cancel := startCall(ctx, p.store.timeout)
	k := p.store.redisKey(key) + ":ban"
	args := []any{p.length}
	if p.store.clock != nil {
		t := p.store.clock.c.Now()
		args = append(args, t.Unix(), t.Nanosecond())
	}
	us, err := penaltyBanScript.Run(tctx, p.store.client, []string{k}, args...).Int64()
	c.end(cancel)
	p.counts.calls.Add(1)
	if err != nil || us < 0 {
		p.counts.errors.Add(1)
		return
	}
	if us == 0 {
		// A ban recorded after now (by Refused) is newer than
		// Redis's answer, and stays.
		p.known.forgetBefore(key, now)
		return
	}
	limit, err := p.limitOf(ctx, key)
	if err != nil {
		return
	}
	p.remember(key, limit, fromMicros(us), now, mono)
}
