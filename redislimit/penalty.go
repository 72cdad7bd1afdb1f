package redislimit

import (
	"context"
	_ "embed"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
	"github.com/redis/go-redis/v9"
)

//go:embed lua/penalty.lua
var penaltyLua string

// penaltyScript records a refusal, and starts a ban (lua/penalty.lua).
var penaltyScript = redis.NewScript(penaltyLua)

// redisBans is the store of a Penalty's bans on Redis (see NewPenalty):
// keylimit's Penalty asks it whether a key is banned, and tells it each
// refusal that counts.
type redisBans struct {
	ban   keylimit.Ban
	store store // the client, the prefix, the timeout, the script's clock
	clock localClock
	// known are the bans this instance knows, each until its end (as Redis
	// told it, moved on by local time): a deny cache of refusals of one
	// event, which cover any request.
	known denyCache
	// The script's arguments, boxed once.
	refusals, within, length any
	channel                  string // "" for no announcements
	id                       string // this instance's, in its announcements
	counts                   counts // hits: refusals by a known ban; calls, errors: the script's
	bans                     atomic.Uint64
	listen                   *redis.PubSub // nil without announcements
	hints                    banHints      // the keys announced, to check with Redis
	stop                     context.CancelFunc
	done                     sync.WaitGroup
	// limitOf is the limit the penalty's limiter reports for a key (its
	// Peek's Result.Limit), which a ban an announcement named reports.
	limitOf func(ctx context.Context, key string) (int, error)
}

// NewPenalty returns a keylimit.Penalty for a fleet, named name (its
// default prefix, "keylimit:name:penalty:", holds it), that bans by b the
// keys inner refuses too often: a key inner refused Ban.Refusals times
// within Ban.Within, counted on Redis over every instance, is banned on
// Redis for Ban.For. Penalties of one prefix, on every instance, count and
// ban together. Each instance remembers the bans it knows until they end,
// and answers a banned key in process, without a Redis call or a call of
// its limiter, with Result.Banned set and RetryAfter at the ban's end.
//
// An instance knows a ban from three places: it started it; it was
// announced (a Pub/Sub message on the prefix's channel, which every
// instance subscribes to), and Redis, asked, holds it; or its limiter
// refused the key, and Redis, asked to count the refusal, answered that the
// key is banned. It knows a ban for as long as Redis says it has left, at
// most Ban.For: an announcement only names a key, since anyone may publish
// on the channel. A ban it knows from an announcement reports the Limit
// that inner's Peek reports for the key (a call of inner's, as the ban is
// heard). A Reset forgets the key's ban and refusals on Redis and
// is announced alike: it lifts the ban it checks on every instance. A ban
// never makes a decision looser than the limiter's: a banned key is
// refused, any other gets exactly the limiter's answer. An instance that
// missed the announcement (it was reconnecting, or a flood of
// announcements left it no room to check) admits what its limiter admits
// until the limiter's first refusal. Peek and WaitN ask Redis nothing of
// the ban: they see the bans this instance knows.
//
// Only refusals a later call could pass count (not a request that can
// never pass, an untracked key, one whose limit could not be applied, or a
// failure policy's answer). When Redis fails, a refusal is not counted and
// the limiter's answer stands. Stats adds the penalty's calls to Redis,
// and those that failed, to the limiter's; Bans counts the bans this
// instance started, BanRefused its refusals by the bans it knows.
//
// It takes WithPrefix, WithTimeout, keylimit.WithClock, keylimit.WithLogger and
// WithDenyCacheSize (the most bans an instance remembers; 0: none, and
// every banned key is a call to Redis), and returns an error if b, an
// option or the client is invalid. Close stops its subscription to the
// announcements and returns its error; inner is the caller's to close.
func NewPenalty(client redis.UniversalClient, name string, inner keylimit.Limiter[string], b keylimit.Ban, opts ...Option) (*keylimit.Penalty[string], error) {
	if inner == nil {
		return nil, errors.New("redislimit: NewPenalty needs a limiter to wrap")
	}
	// keylimit says what is wrong with b before the store is made.
	p, err := compose.NewPenalty(inner, b, func() (any, error) {
		return newRedisBans(client, name, b, opts, func(ctx context.Context, key string) (int, error) {
			if c, ok := inner.(interface {
				PeekContext(ctx context.Context, key string) (keylimit.Result, error)
			}); ok {
				r, err := c.PeekContext(ctx, key)
				return r.Limit, err
			}
			return inner.Peek(key).Limit, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return p.(*keylimit.Penalty[string]), nil
}

// newRedisBans returns the store of a Penalty named name that bans by b
// on client; limitOf is the limit its limiter reports for a key.
func newRedisBans(client redis.UniversalClient, name string, b keylimit.Ban, opts []Option,
	limitOf func(ctx context.Context, key string) (int, error)) (*redisBans, error) {
	if client == nil {
		return nil, errors.New("redislimit: the Redis client is nil")
	}
	if err := checkClient(client); err != nil {
		return nil, err
	}
	o, err := buildOptions(name, opts)
	if err != nil {
		return nil, err
	}
	if o.leaseTime > 0 || o.policySet || o.fleet > 0 {
		return nil, errors.New("redislimit: a Penalty takes no leases or failure policy: its limiter decides")
	}
	if o.holdExpiry > 0 || o.maxHold > 0 {
		return nil, errors.New("redislimit: WithHoldExpiry and WithMaxHold are for a concurrency limit: a Penalty holds nothing")
	}
	prefix := "keylimit:" + name + ":penalty:"
	if o.prefix != nil {
		prefix = *o.prefix
	}
	p := &redisBans{
		ban:      b,
		store:    store{client: client, prefix: prefix, timeout: o.timeout, clock: o.scriptClock},
		refusals: int64(b.Refusals),
		within:   micros(b.Within),
		length:   micros(b.For),
		channel:  prefix + "bans",
		limitOf:  limitOf,
	}
	p.id = strconv.FormatUint(rand.Uint64(), 36)
	p.clock.init(o.clock)
	p.counts.init()
	p.known.init(o.denySize, &p.counts, nil)
	if o.clock != nil && o.scriptClock == nil {
		p.known.mono = &p.clock // a ban ends on Redis's time, which the system's clock keeps pace with
	}
	if o.denySize > 0 {
		p.listen = client.Subscribe(context.Background(), p.channel)
		// Wait for the subscription, so that the bans announced after
		// NewPenalty returns are heard. A Redis down now is no error: the
		// subscription reconnects by itself.
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		_, _ = p.listen.Receive(ctx)
		cancel()
		ch := p.listen.Channel()
		p.hints.init()
		var checking context.Context
		checking, p.stop = context.WithCancel(context.Background())
		p.done.Add(2)
		go p.hear(ch)
		go p.checkHints(checking)
	} else {
		p.channel = ""
	}
	return p, nil
}

// micros is d in whole µs, rounded up (a longer ban and a longer span
// only refuse more), at most 2^60 ns.
func micros(d time.Duration) int64 {
	d = time.Duration(clampSpan(d))
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// parseRefusal reads the script's reply, "banned left started" (left in
// µs), or reports false.
func parseRefusal(reply string) (left time.Duration, started, ok bool) {
	f := strings.Fields(reply)
	if len(f) != 3 || f[0] != "0" && f[0] != "1" || f[2] != "0" && f[2] != "1" {
		return 0, false, false
	}
	us, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || us < 0 {
		return 0, false, false
	}
	if f[0] == "0" {
		return 0, false, true
	}
	return fromMicros(us), f[2] == "1", true
}

// fromMicros is us µs (us >= 0), at most 2^60 ns.
func fromMicros(us int64) time.Duration {
	return time.Duration(min(us, maxSpan/1000)) * time.Microsecond
}

// remember records that key is banned for left, at most Ban.For, from
// local time now and mono (p.known.monoNow's, read with now), by a limit of
// quota limit.
func (p *redisBans) remember(key string, limit int, left time.Duration, now, mono int64) {
	left = min(left, p.ban.For)
	p.known.record(key, 1, keylimit.Result{Limit: limit, RetryAfter: left, ResetAfter: left, RefillAfter: left, Banned: true}, now, mono)
}

// Banned is the refusal by key's ban, if this instance knows one now;
// refuse counts it as a hit of the cache (BanRefused).
func (p *redisBans) Banned(key string, refuse bool) (keylimit.Result, bool) {
	now := p.clock.now()
	if refuse {
		return p.known.check(key, 1, now)
	}
	e, ok := p.known.load(key, 1, now)
	if !ok {
		return keylimit.Result{}, false
	}
	r := e.res
	r.RetryAfter = time.Duration(e.until - now)
	r.ResetAfter = r.RetryAfter
	return r, true
}

// Forget forgets key's ban and its refusals, on Redis and here, and
// announces it: the other instances that hear it forget the ban once
// Redis tells them it is gone (the others, when it ends). Its calls to
// Redis, and those that fail, are in Stats (Calls, Errors).
func (p *redisBans) Forget(key string) {
	p.known.forget(key)
	k := p.store.redisKey(key)
	if err := p.store.del(context.Background(), k, k+":ban"); !p.counted(err) || p.channel == "" {
		return
	}
	// Length 0: an instance of an earlier version, which believed the
	// length, ignores it.
	c, tctx, cancel := startCall(context.Background(), p.store.timeout)
	err := p.store.client.Publish(tctx, p.channel, "0 0 "+p.id+" "+key).Err()
	c.end(cancel)
	p.counted(err)
}

// counted counts a call to Redis that returned err in Stats, and reports
// whether it succeeded.
func (p *redisBans) counted(err error) bool {
	p.counts.calls.Add(1)
	if err != nil {
		p.counts.errors.Add(1)
	}
	return err == nil
}

// Timers is the clock a wait for a ban's end sleeps on: keylimit.WithClock's, or
// the system's.
func (p *redisBans) Timers() clock.Clock {
	if p.clock.injected != nil {
		return p.clock.injected
	}
	return clock.New()
}

// AddStats sets the bans this instance started (Bans) and its refusals
// by the bans it knows (BanRefused) in st, and adds its calls to Redis,
// Errors and ScriptErrors to st's.
func (p *redisBans) AddStats(st *keylimit.Stats) {
	own := p.counts.stats()
	st.Bans, st.BanRefused = p.bans.Load(), own.CacheHits
	st.Calls += own.Calls
	st.Errors += own.Errors
	st.ScriptErrors += own.ScriptErrors
}

// Close stops the subscription to the announcements of bans, and returns
// its error.
func (p *redisBans) Close() error {
	if p.listen == nil {
		return nil
	}
	p.stop()
	err := p.listen.Close()
	p.done.Wait()
	return err
}

// Refused counts a refusal of key on Redis, and returns how long key is
// banned after it, if it is, remembering the ban.
func (p *redisBans) Refused(ctx context.Context, key string, limit int) (time.Duration, bool) {
	// now is read before the call: the ban remembered ends a little
	// before Redis's, and the next call after it asks again.
	now, mono := p.clock.now(), p.known.monoNow()
	left, started, ok := p.refused(ctx, key, limit)
	if !ok || left <= 0 {
		return 0, false
	}
	if started {
		p.bans.Add(1)
	}
	left = min(left, p.ban.For)
	p.remember(key, limit, left, now, mono)
	return left, true
}

// refused counts a refusal of key, by a limit of quota limit, on Redis, and returns the time until
// the key's ban ends, if it is banned after it, and whether this refusal
// started the ban. ok is false if Redis failed.
func (p *redisBans) refused(ctx context.Context, key string, limit int) (left time.Duration, started, ok bool) {
	c, tctx, cancel := startCall(ctx, p.store.timeout)
	k := p.store.redisKey(key)
	args := []any{p.refusals, p.within, p.length, p.channel, strconv.Itoa(limit) + " " + p.id, key}
	if p.store.clock != nil {
		now := p.store.clock.c.Now()
		args = append(args, now.Unix(), now.Nanosecond())
	}
	reply, err := penaltyScript.Run(tctx, p.store.client, []string{k, k + ":ban"}, args...).Text()
	c.end(cancel)
	p.counts.calls.Add(1)
	if err != nil {
		if errors.Is(scriptFailure(err), ErrScript) {
			p.counts.scriptErrors.Add(1)
		} else {
			p.counts.errors.Add(1)
		}
		return 0, false, false
	}
	left, started, ok = parseRefusal(reply)
	if !ok {
		p.counts.errors.Add(1)
	}
	return left, started, ok
}
