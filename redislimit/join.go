package redislimit

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
	"github.com/redis/go-redis/v9"
)

// keylimit.All asks join (through internal/compose) to join its limiters
// when the first is one of the rate limiters of this package.
func init() {
	compose.RegisterJoin(func(ls []any) (any, bool) {
		first := limiterOfAny(ls[0])
		if first == nil {
			return nil, false
		}
		typed := make([]keylimit.Limiter[string], len(ls))
		for i, x := range ls {
			l, ok := x.(keylimit.Limiter[string])
			if !ok {
				return nil, false
			}
			typed[i] = l
		}
		return first.join(typed)
	})
}

// limiterOfAny is limiterOf for a value of any type.
func limiterOfAny(x any) *Keyed {
	l, _ := x.(keylimit.Limiter[string])
	return limiterOf(l)
}

// join returns a limiter that decides for all of ls (this limiter first) in
// one script call per decision, all or nothing inside Redis: what
// keylimit.All returns for them. It reports false, and All decides limiter
// by limiter instead, unless every one of ls is a TokenBucket, FixedWindow
// or SlidingWindow of this package on the same client, without leases
// (their leases decide in process, not in one call), and no two share a
// prefix.
//
// On Redis Cluster (and a Ring) the states of one key share a slot because
// each is prefix{key}: the key is the hash tag (a hash of it, for a key the
// tag cannot hold; see StateKey). A prefix that contains '{'
// would make its own braces the tag, so on those clients join reports false
// for limiters whose prefixes contain one.
//
// The joined limiter has All's semantics and Results, and implements
// keylimit.ContextLimiter, keylimit.All's TakeEach and keylimit.ContextLimiter.
// Its Reset is one DEL of every state. See joined for the rest.
func (l *Keyed) join(ls []keylimit.Limiter[string]) (keylimit.Limiter[string], bool) {
	parts := make([]*Keyed, 0, len(ls))
	prefixes := make(map[string]bool, len(ls))
	_, plain := l.store.client.(*redis.Client)
	for _, x := range ls {
		p := limiterOf(x)
		if p == nil || p.leases != nil || p.store.client != l.store.client || !sameScriptClock(p.store.clock, l.store.clock) ||
			prefixes[p.store.prefix] {
			return nil, false
		}
		if !plain && strings.Contains(p.store.prefix, "{") {
			return nil, false
		}
		prefixes[p.store.prefix] = true
		parts = append(parts, p)
	}
	if len(parts) == 0 || parts[0] != l {
		return nil, false
	}
	j := &joined{parts: parts, store: store{client: l.store.client, timeout: l.store.timeout, clock: l.store.clock}}
	j.store.takes.setClient(l.store.client, l.store.timeout)
	for _, p := range parts {
		j.store.timeout = min(j.store.timeout, p.store.timeout)
	}
	j.deny.init(l.deny.max, &l.ops.counts, nil)
	j.deny.mono = l.deny.mono // it decides on parts[0]'s clock
	return j, true
}

// limiterOf returns the Redis limiter x is, or nil.
func limiterOf(x keylimit.Limiter[string]) *Keyed {
	switch x := x.(type) {
	case *TokenBucket:
		return &x.Keyed
	case *FixedWindow:
		return &x.Keyed
	case *SlidingWindow:
		return &x.Keyed
	}
	return nil
}

// joined is the limiter join returns: several Redis limiters on one client,
// deciding for a key in one script call. Its decision path is its own
// down to the call: a deny cache of its own (of the size of the first
// limiter's), whose entries hold every limiter's Result; then each
// limiter's guard, around one call of its own store. When Redis fails,
// each limiter's failure policy answers for it, and the error goes to
// each one's WithOnError; the failure backoff of any of them holds for
// all. Each limiter's Stats count the joined requests and round trips it
// took part in.
type joined struct {
	parts []*Keyed
	store store // the first limiter's client and script clock, the least of the parts' timeouts
	deny  denyCache
}

// Allow is shorthand for AllowN(key, 1).
func (j *joined) Allow(key string) bool { return j.Take(key, 1).Allowed }

// AllowN is shorthand for Take(key, n).Allowed.
func (j *joined) AllowN(key string, n int) bool { return j.Take(key, n).Allowed }

// Take takes n for key from every limiter, or from none: TakeEach with
// context.Background() and no each.
func (j *joined) Take(key string, n int) keylimit.Result {
	r, _, _ := j.admit(context.Background(), key, n, nil, false)
	return r
}

// TakeContext is Take under ctx: a ctx that has ended makes no call.
func (j *joined) TakeContext(ctx context.Context, key string, n int) (keylimit.Result, error) {
	r, _, err := j.admit(ctx, key, n, nil, false)
	return r, err
}

// TakeEach is TakeContext, and writes each limiter's Result into each (see
// keylimit.All's TakeEach): one script call answers for all of them.
func (j *joined) TakeEach(ctx context.Context, key string, n int, each []keylimit.Result) (keylimit.Result, error) {
	r, _, err := j.admit(ctx, key, n, each, false)
	return r, err
}

// Admit is Take, and also returns what the admission took, for Refund.
func (j *joined) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r, a, _ := j.admit(context.Background(), key, n, nil, true)
	return r, a
}

// AdmitContext is Admit under ctx.
func (j *joined) AdmitContext(ctx context.Context, key string, n int) (keylimit.Result, keylimit.Admission, error) {
	return j.admit(ctx, key, n, nil, true)
}

// joinedAdmission is the By of a joined limiter's Admission: what each
// limiter's part of it took, bound to its key and refunded at most once,
// as a limiter's admission is.
type joinedAdmission struct {
	by    *joined
	key   string
	n     int
	parts []keylimit.Admission
	done  atomic.Bool // set by the Refund that gives it back
}

// resolve returns the limit key is under in each limiter.
func (j *joined) resolve(key string, buf *[inlineParts]*keyLimit) []*keyLimit {
	ks := buf[:0]
	for _, p := range j.parts {
		ks = append(ks, p.limits.Resolve(key))
	}
	return ks
}

// buffers returns a slice for each limiter's Result, and one for its mark.
func (j *joined) buffers(res *[inlineParts]keylimit.Result, marks *[inlineParts]int64) ([]keylimit.Result, []int64) {
	if len(j.parts) > inlineParts {
		return make([]keylimit.Result, len(j.parts)), make([]int64, len(j.parts))
	}
	return res[:len(j.parts)], marks[:len(j.parts)]
}

// admit takes n for key from every limiter or from none, writes each
// limiter's Result into each if it is not nil, and returns the admission if
// record is set.
func (j *joined) admit(ctx context.Context, key string, n int, each []keylimit.Result, record bool) (keylimit.Result, keylimit.Admission, error) {
	r, a, err := j.decide(ctx, key, n, each, record)
	for _, p := range j.parts {
		p.ops.counts.decided(r.Allowed) // the request, in every limiter's Stats
	}
	return r, a, err
}

// decide is admit, not counted in Stats.
func (j *joined) decide(ctx context.Context, key string, n int, each []keylimit.Result, record bool) (keylimit.Result, keylimit.Admission, error) {
	var kbuf [inlineParts]*keyLimit
	var rbuf [inlineParts]keylimit.Result
	var mbuf [inlineParts]int64
	ks := j.resolve(key, &kbuf)
	res, marks := j.buffers(&rbuf, &mbuf)
	for i, k := range ks {
		if r, ok := k.never(n); ok {
			// Refused here without a round trip; the others are asked what
			// they would say only if each wants it.
			if each == nil {
				return r, keylimit.Admission{}, nil
			}
			err := j.peek(ctx, key, ks, res)
			res[i] = r
			copy(each, res)
			return refusedBy(res, i), keylimit.Admission{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return keylimit.Result{Limit: ks[0].quota}, keylimit.Admission{}, j.report("take", key, err)
	}
	if n == 0 {
		err := j.peek(ctx, key, ks, res)
		for i := range res {
			res[i].Allowed, res[i].RetryAfter = true, 0
		}
		copy(each, res)
		return allowed(res), keylimit.Admission{}, err
	}
	now := j.parts[0].clock.now()
	if r, ok := j.cached(key, n, ks, now, res); ok {
		copy(each, res)
		return r, keylimit.Admission{}, nil
	}
	d := decision{key: key, n: n, parts: ks}
	gen, mono := j.deny.gen(key), j.deny.monoNow()
	if err := j.call(ctx, modeTake, &d, now, res, marks); err != nil {
		return j.failed(ctx, key, ks, n, err, each, record)
	}
	copy(each, res)
	for i, r := range res {
		if !r.Allowed {
			sum := refusedBy(res, i)
			j.deny.recordEach(key, n, sum, now, mono, res, gen)
			return sum, keylimit.Admission{}, nil
		}
	}
	sum := allowed(res)
	if !record {
		return sum, keylimit.Admission{}, nil
	}
	adm := &joinedAdmission{by: j, key: key, n: n, parts: make([]keylimit.Admission, len(ks))}
	for i, k := range ks {
		adm.parts[i] = keylimit.Admission{N: n, Mark: marks[i], By: k}
	}
	return sum, keylimit.Admission{N: n, By: adm}, nil
}

// cached answers a request of n events for key from the deny cache at local
// time now, writing each limiter's Result into res, if a refusal made under
// the same quotas covers it.
func (j *joined) cached(key string, n int, ks []*keyLimit, now int64, res []keylimit.Result) (keylimit.Result, bool) {
	r, ok := j.deny.checkEach(key, n, now, res)
	if !ok {
		return r, false
	}
	for i, k := range ks {
		if res[i].Limit != k.quota {
			j.deny.forget(key) // remembered under other limits
			return keylimit.Result{}, false
		}
	}
	return r, true
}

// call makes the script call d in mode at local time now, unless Redis failed less
// than a backoff ago under one of the limiters.
func (j *joined) call(ctx context.Context, mode any, d *decision, now int64, res []keylimit.Result, marks []int64) error {
	for _, p := range j.parts {
		if err := p.guard.down(now); err != nil {
			return err
		}
	}
	err := j.store.run(ctx, mode, d, res, marks)
	j.observe(ctx, err, now)
	return err
}

// observe follows a round trip of the joined limiter made at local time
// now that returned err, in every limiter's guard: it is counted once, in
// the Stats of the first limiter, whose client and store made it, so that
// a sum of the limiters' Calls counts it once.
func (j *joined) observe(ctx context.Context, err error, now int64) {
	j.parts[0].guard.observe(ctx, err, now)
	for _, p := range j.parts[1:] {
		p.guard.observeShared(ctx, err, now)
	}
}

// failed answers a request of n events for key by each limiter's failure
// policy in turn, all or nothing: what the fallback limiters before a
// refusing one took is given back.
func (j *joined) failed(ctx context.Context, key string, ks []*keyLimit, n int, err error, each []keylimit.Result,
	record bool) (keylimit.Result, keylimit.Admission, error) {
	res := make([]keylimit.Result, len(ks))
	adms := make([]keylimit.Admission, len(ks))
	var first error
	refuser := -1
	for i, p := range j.parts {
		var e error
		if refuser < 0 {
			res[i], adms[i], e = p.guard.failed(ctx, "take", key, ks[i], n, err)
			if !res[i].Allowed {
				refuser = i
			}
		} else {
			res[i], _, e = p.guard.failed(ctx, "peek", key, ks[i], 0, err)
		}
		if first == nil {
			first = e
		}
	}
	if refuser >= 0 {
		undo := context.WithoutCancel(ctx)
		for i := refuser - 1; i >= 0; i-- {
			_ = j.parts[i].refund(undo, key, adms[i])
			if fb := j.parts[i].guard.fallback; fb != nil {
				res[i] = fb.Peek(key)
			}
		}
		copy(each, res)
		return refusedBy(res, refuser), keylimit.Admission{}, first
	}
	copy(each, res)
	if !record {
		return allowed(res), keylimit.Admission{}, first
	}
	return allowed(res), keylimit.Admission{N: n, By: &joinedAdmission{by: j, key: key, n: n, parts: adms}}, first
}

// Peek reports what Take(key, 1) would answer now, taking nothing: one
// script call, or none if the deny cache covers the key.
func (j *joined) Peek(key string) keylimit.Result {
	r, _ := j.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek under ctx: a ctx that has ended makes no call.
func (j *joined) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	return j.PeekEach(ctx, key, nil)
}

// PeekEach is PeekContext, and writes each limiter's Peek into each if it
// is not nil (see All's PeekEach).
func (j *joined) PeekEach(ctx context.Context, key string, each []keylimit.Result) (keylimit.Result, error) {
	var kbuf [inlineParts]*keyLimit
	var rbuf [inlineParts]keylimit.Result
	var mbuf [inlineParts]int64
	ks := j.resolve(key, &kbuf)
	res, _ := j.buffers(&rbuf, &mbuf)
	if err := ctx.Err(); err != nil {
		for i := range each {
			each[i] = keylimit.Result{Limit: ks[i].quota}
		}
		return keylimit.Result{Limit: ks[0].quota}, j.report("peek", key, err)
	}
	if r, ok := j.cached(key, 1, ks, j.parts[0].clock.now(), res); ok {
		copy(each, res)
		return r, nil
	}
	err := j.peek(ctx, key, ks, res)
	copy(each, res)
	sum := res[0]
	decider := -1
	for i, r := range res {
		if i > 0 {
			sum = sum.And(r)
		}
		if !r.Allowed && decider < 0 {
			decider = i
		}
	}
	if decider >= 0 {
		sum.Limit = res[decider].Limit
	}
	return sum, err
}

// peek writes each limiter's Peek of key into res, in one script call for
// those whose limits are valid; while Redis fails, their failure policies'.
func (j *joined) peek(ctx context.Context, key string, ks []*keyLimit, res []keylimit.Result) error {
	valid := make([]*keyLimit, 0, len(ks))
	for i, k := range ks {
		if r, ok := k.never(1); ok {
			res[i] = r
		} else {
			valid = append(valid, k)
		}
	}
	if len(valid) == 0 {
		return nil
	}
	got := make([]keylimit.Result, len(valid))
	d := decision{key: key, n: 1, parts: valid}
	err := j.call(ctx, modePeek, &d, j.parts[0].clock.now(), got, make([]int64, len(valid)))
	var first error
	v := 0
	for i, k := range ks {
		if k.err != nil {
			continue
		}
		if err != nil {
			var e error
			got[v], _, e = j.parts[i].guard.failed(ctx, "peek", key, k, 0, err)
			if first == nil {
				first = e
			}
		}
		res[i] = got[v]
		v++
	}
	return first
}

// Reset forgets key in every limiter: reset with context.Background().
func (j *joined) Reset(key string) { _ = j.reset(context.Background(), key) }

// reset forgets key in every limiter, on Redis in one DEL of every state,
// and in every deny cache and fallback. As a limiter's Reset, it asks
// Redis even during a failure backoff; a ctx that has ended makes no call.
func (j *joined) reset(ctx context.Context, key string) error {
	j.deny.forget(key)
	defer j.forgetDenials(key) // what a round trip that met it recorded
	keys := make([]string, len(j.parts))
	for i, p := range j.parts {
		p.deny.forget(key)
		p.guard.forget(key)
		keys[i] = p.store.redisKey(key)
	}
	if err := ctx.Err(); err != nil {
		return j.report("reset", key, err)
	}
	now := j.parts[0].clock.now()
	err := j.store.del(ctx, keys...)
	j.observe(ctx, err, now)
	if err != nil {
		return j.report("reset", key, err)
	}
	return nil
}

// Refund gives back what a, an Admission of this limiter, still holds in
// each limiter: RefundContext with context.Background().
func (j *joined) Refund(key string, a keylimit.Admission) {
	_ = j.RefundContext(context.Background(), key, a)
}

// RefundContext gives back each limiter's part of a, an Admission this
// limiter made for key, as far as it still holds (see the limiters'
// RefundContext): in one script call, and what the fallback limiters
// admitted while Redis failed, in process. As a limiter's, it gives back an
// Admission once, and only under its own key; a ctx that has ended makes no
// call.
func (j *joined) RefundContext(ctx context.Context, key string, a keylimit.Admission) error {
	adm, ok := a.By.(*joinedAdmission)
	if !ok || adm.by != j || adm.key != key {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return j.report("refund", key, err)
	}
	if !adm.done.CompareAndSwap(false, true) {
		return nil
	}
	j.deny.forget(key)
	defer j.forgetDenials(key) // what a round trip that met it recorded
	var ks []*keyLimit
	var marks []int64
	for i, p := range j.parts {
		part := adm.parts[i]
		part.N = min(part.N, a.N)
		if k, ok := part.By.(*keyLimit); ok && k.owner == &p.store && part.N > 0 {
			p.deny.forget(key)
			ks = append(ks, k)
			marks = append(marks, part.Mark)
		} else {
			_ = p.refund(ctx, key, part) // the fallback's, if any
		}
	}
	if len(ks) == 0 {
		return nil
	}
	n := min(adm.n, a.N) // a.N lowered: a partial refund (see keylimit.Refunder)
	if n <= 0 {
		return nil
	}
	for _, k := range ks {
		n = min(n, k.quota)
	}
	d := decision{key: key, n: n, parts: ks, marks: marks}
	if err := j.call(ctx, modeRefund, &d, j.parts[0].clock.now(), make([]keylimit.Result, len(ks)), make([]int64, len(ks))); err != nil {
		return j.report("refund", key, err)
	}
	return nil
}

// forgetDenials forgets key's refusals in the joined deny cache and in
// every limiter's (see denyCache.gens).
func (j *joined) forgetDenials(key string) {
	j.deny.forget(key)
	for _, p := range j.parts {
		p.deny.forget(key)
	}
}

// report passes err to every limiter's WithOnError (see guard.report),
// and returns the first limiter's *Error.
func (j *joined) report(op, key string, err error) error {
	var first error
	for _, p := range j.parts {
		if e := p.guard.report(op, key, err); first == nil {
			first = e
		}
	}
	return first
}

// allowed is the Result of an admission under every limiter, res their
// Results: the least Remaining binds and brings its Limit, as in
// keylimit.All.
func allowed(res []keylimit.Result) keylimit.Result {
	sum := res[0]
	for _, r := range res[1:] {
		sum = sum.And(r)
	}
	return sum
}

// refusedBy is the Result of a request limiter i refused, res every
// limiter's Result (the others' Peeks): refused, with limiter i's Limit, as
// in keylimit.All.
func refusedBy(res []keylimit.Result, i int) keylimit.Result {
	sum := res[i]
	for j, r := range res {
		if j != i {
			sum = sum.And(r)
		}
	}
	sum.Allowed, sum.Limit = false, res[i].Limit
	return sum
}

var (
	_ keylimit.ContextLimiter[string] = (*joined)(nil)
)
