package redislimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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

// Penalty is keylimit.Penalty for a fleet: a key its limiter refused
// Ban.Refusals times within Ban.Within, counted on Redis over every
// instance, is banned on Redis for Ban.For. Each instance remembers the
// bans it knows until they end, and answers a banned key in process,
// without a Redis call or a call of its limiter, with Result.Banned set and
// RetryAfter at the ban's end.
//
// An instance knows a ban from three places: it started it; it was
// announced (a Pub/Sub message on the prefix's channel, which every
// instance subscribes to), and Redis, asked, holds it; or its limiter
// refused the key, and Redis, asked to count the refusal, answered that the
// key is banned. It knows a ban for as long as Redis says it has left, at
// most Ban.For: an announcement only names a key, since anyone may publish
// on the channel. A Reset is announced alike, and lifts the ban it checks
// on every instance. A ban never makes a decision looser than the
// limiter's: a banned key is refused, any other gets exactly the limiter's
// answer. An instance that missed the announcement (it was reconnecting,
// or a flood of announcements left it no room to check) admits what its
// limiter admits until the limiter's first refusal.
//
// Only refusals a later call could pass count (not a request that can
// never pass, an untracked key, one whose limit could not be applied, or a
// failure policy's answer). When Redis fails, a refusal is not counted and
// the limiter's answer stands.
type Penalty struct {
	inner keylimit.Limiter[string]
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
}

// NewPenalty returns a Penalty named name (its default prefix,
// "keylimit:name:penalty:", holds it) that bans by b the keys inner
// refuses too often. Penalties of one prefix, on every instance, count
// and ban together. It takes WithPrefix, WithTimeout, WithClock, WithLogger
// and WithDenyCacheSize (the most bans an instance remembers; 0: none,
// and every banned key is a call to Redis), and returns an error if b, an
// option or the client is invalid. Close stops its subscription; inner is
// the caller's to close.
func NewPenalty(client redis.UniversalClient, name string, inner keylimit.Limiter[string], b keylimit.Ban, opts ...Option) (*Penalty, error) {
	if inner == nil {
		return nil, errors.New("redislimit: NewPenalty needs a limiter to wrap")
	}
	// keylimit's Penalty says what is wrong with a ban, as for one in
	// process; it is closed at once.
	check, err := keylimit.NewPenalty(inner, b)
	if err != nil {
		return nil, err
	}
	check.Close()
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
	p := &Penalty{
		inner:    inner,
		ban:      b,
		store:    store{client: client, prefix: prefix, timeout: o.timeout, clock: o.scriptClock},
		refusals: int64(b.Refusals),
		within:   micros(b.Within),
		length:   micros(b.For),
		channel:  prefix + "bans",
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
// local time now and mono (p.known.monoNow's, read with now); r is the
// limiter's refusal that told, for its Limit.
func (p *Penalty) remember(key string, r keylimit.Result, left time.Duration, now, mono int64) {
	left = min(left, p.ban.For)
	p.known.record(key, 1, keylimit.Result{Limit: r.Limit, RetryAfter: left, ResetAfter: left, RefillAfter: left, Banned: true}, now, mono)
}

// knownBan is the refusal by key's ban, if this instance knows one now.
// Unlike the cache's check, it counts no hit: Peek and WaitN refuse
// nothing.
func (p *Penalty) knownBan(key string) (keylimit.Result, bool) {
	now := p.clock.now()
	e, ok := p.known.load(key, 1, now)
	if !ok {
		return keylimit.Result{}, false
	}
	r := e.res
	r.RetryAfter = time.Duration(e.until - now)
	r.ResetAfter = r.RetryAfter
	return r, true
}

// A Penalty reports the limiter it wraps to quota, which announces that
// limiter's window.
func init() {
	compose.RegisterInner(func(l any) (any, bool) {
		p, ok := l.(*Penalty)
		if !ok {
			return nil, false
		}
		return p.inner, true
	})
}

// Allow is shorthand for AllowN(key, 1).
func (p *Penalty) Allow(key string) bool { return p.Take(key, 1).Allowed }

// AllowN is shorthand for Take(key, n).Allowed.
func (p *Penalty) AllowN(key string, n int) bool { return p.Take(key, n).Allowed }

// Take is TakeContext without a deadline but the penalty's timeout.
func (p *Penalty) Take(key string, n int) keylimit.Result {
	r, _ := p.TakeContext(context.Background(), key, n)
	return r
}

// TakeContext refuses n events for a key banned as far as this instance
// knows; for any other, it is the limiter's decision (under ctx, if it
// takes one), whose refusal is counted on Redis toward a ban. The error is
// the limiter's, or ctx's if it has ended; a failed count is no error
// (Stats counts it).
func (p *Penalty) TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error) {
	if err := ctx.Err(); err != nil {
		return keylimit.Result{}, err
	}
	if r, ok := p.known.check(key, 1, p.clock.now()); ok {
		return r, nil
	}
	var r keylimit.Result
	var err error
	if c, ok := p.inner.(interface {
		TakeContext(context.Context, string, int) (keylimit.Result, error)
	}); ok {
		r, err = c.TakeContext(ctx, key, n)
	} else {
		r = p.inner.Take(key, n)
	}
	return p.judge(ctx, key, r, err), err
}

// Admit is AdmitContext without a deadline but the penalty's timeout.
func (p *Penalty) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r, a, _ := p.AdmitContext(context.Background(), key, n)
	return r, a
}

// AdmitContext is TakeContext, and returns the limiter's Admission, for
// Refund; a limiter that is not a keylimit.Refunder gives a zero one.
func (p *Penalty) AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	if err := ctx.Err(); err != nil {
		return keylimit.Result{}, keylimit.Admission{}, err
	}
	if r, ok := p.known.check(key, 1, p.clock.now()); ok {
		return r, keylimit.Admission{}, nil
	}
	var r keylimit.Result
	var a keylimit.Admission
	var err error
	switch rf := p.inner.(type) {
	case interface {
		AdmitContext(context.Context, string, int) (keylimit.Result, keylimit.Admission, error)
	}:
		r, a, err = rf.AdmitContext(ctx, key, n)
	case keylimit.Refunder[string]:
		r, a = rf.Admit(key, n)
	default:
		r, err = p.TakeContext(ctx, key, n)
		return r, keylimit.Admission{}, err
	}
	return p.judge(ctx, key, r, err), a, err
}

// Refund gives a, an Admission of the limiter's, back to it. A refund
// lifts no ban.
func (p *Penalty) Refund(key string, a keylimit.Admission) {
	_ = p.RefundContext(context.Background(), key, a)
}

// RefundContext is Refund under ctx, for a limiter that takes one.
func (p *Penalty) RefundContext(ctx context.Context, key string, a keylimit.Admission) error {
	switch rf := p.inner.(type) {
	case interface {
		RefundContext(context.Context, string, keylimit.Admission) error
	}:
		return rf.RefundContext(ctx, key, a)
	case keylimit.Refunder[string]:
		rf.Refund(key, a)
	}
	return nil
}

// Peek reports a ban this instance knows, and otherwise the limiter's
// Peek. It asks Redis nothing of the ban, and counts nothing.
func (p *Penalty) Peek(key string) keylimit.Result {
	if r, ok := p.knownBan(key); ok {
		return r
	}
	return p.inner.Peek(key)
}

// PeekContext is Peek under ctx, for a limiter that takes one.
func (p *Penalty) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	if r, ok := p.knownBan(key); ok {
		return r, nil
	}
	if c, ok := p.inner.(interface {
		PeekContext(context.Context, string) (keylimit.Result, error)
	}); ok {
		return c.PeekContext(ctx, key)
	}
	return p.inner.Peek(key), ctx.Err()
}

// Reset forgets key in the limiter, its ban and its refusals, on Redis and
// here, and announces it: the other instances that hear it forget the ban
// once Redis tells them it is gone (the others, when it ends). Its calls
// to Redis, and those that fail, are in Stats (Calls, Errors).
func (p *Penalty) Reset(key string) {
	p.known.forget(key)
	p.inner.Reset(key)
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
func (p *Penalty) counted(err error) bool {
	p.counts.calls.Add(1)
	if err != nil {
		p.counts.errors.Add(1)
	}
	return err == nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (p *Penalty) Wait(ctx context.Context, key string) error { return p.WaitN(ctx, key, 1) }

// WaitN waits out a ban this instance knows of key, then waits by the
// limiter (keylimit.WaitN). It fails at once if the ban outlasts ctx's
// deadline, with an error that matches keylimit.ErrWouldExceedDeadline.
func (p *Penalty) WaitN(ctx context.Context, key string, n int) error {
	timers := clock.Clock(clock.New())
	if p.clock.injected != nil {
		timers = p.clock.injected
	}
	for {
		r, ok := p.knownBan(key)
		if !ok {
			return keylimit.WaitN[string](ctx, p.inner, key, n)
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(timers.Now()) < r.RetryAfter {
			return fmt.Errorf("redislimit: key %q is banned for %v more: %w", key, r.RetryAfter, keylimit.ErrWouldExceedDeadline)
		}
		t := timers.Timer(r.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("redislimit: wait for a ban to end: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Stats returns the limiter's Stats, if it has a Stats method, with the
// penalty's Bans (those this instance started), BanRefused (answered from
// the bans it knows, added to Refused if the limiter counts its
// decisions), and its Calls, Errors and ScriptErrors to Redis added to the
// limiter's.
func (p *Penalty) Stats() keylimit.Stats {
	var st keylimit.Stats
	if s, ok := p.inner.(interface{ Stats() keylimit.Stats }); ok {
		st = s.Stats()
	}
	own := p.counts.stats()
	st.Penalty, st.Bans, st.BanRefused = true, p.bans.Load(), own.CacheHits
	st.Calls += own.Calls
	st.Errors += own.Errors
	st.ScriptErrors += own.ScriptErrors
	if st.Decisions {
		st.Refused += st.BanRefused
	}
	return st
}

// Close stops the penalty's subscription to the announcements of bans;
// it does not close the limiter. It returns the subscription's error.
func (p *Penalty) Close() error {
	if p.listen == nil {
		return nil
	}
	p.stop()
	err := p.listen.Close()
	p.done.Wait()
	return err
}

// judge returns the limiter's answer r for key, having counted it on Redis
// if it is a refusal a later call could pass; err is the limiter's.
func (p *Penalty) judge(ctx context.Context, key string, r keylimit.Result, err error) keylimit.Result {
	if r.Allowed || err != nil || r.Untracked || r.Err != nil || r.RetryAfter == keylimit.InfDuration {
		return r
	}
	// now is read before the call: the ban remembered ends a little
	// before Redis's, and the next call after it asks again.
	now, mono := p.clock.now(), p.known.monoNow()
	left, started, ok := p.refused(ctx, key, r.Limit)
	if !ok || left <= 0 {
		return r
	}
	if started {
		p.bans.Add(1)
	}
	left = min(left, p.ban.For)
	p.remember(key, r, left, now, mono)
	r.RetryAfter = max(r.RetryAfter, left)
	r.ResetAfter = max(r.ResetAfter, left)
	r.RefillAfter = max(r.RefillAfter, left) // no quota until the ban ends
	r.Banned = true
	return r
}

// refused counts a refusal of key, by a limit of quota limit, on Redis, and returns the time until
// the key's ban ends, if it is banned after it, and whether this refusal
// started the ban. ok is false if Redis failed.
func (p *Penalty) refused(ctx context.Context, key string, limit int) (left time.Duration, started, ok bool) {
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

var (
	_ keylimit.ContextLimiter[string] = (*Penalty)(nil)
)
