package keylimit

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit/internal/compose"
)

// All returns a Limiter that admits n events for a key only if every one of
// limiters admits them: 10 a minute AND 500 an hour on the same API key. A
// refused request takes nothing: All asks the limiters one by one, and when
// one refuses, gives back (Refund) exactly what the ones before it took.
// It asks those that decide in process and can Refund (their Stats do not
// say Remote) before the others (the redislimit ones, whose Stats say
// Remote, and any without Stats), each group in the order given: a request
// an in-process limiter refuses makes no round trip, and a remote refusal
// is given back in process. Put the limiter most likely to refuse first in
// its group. If the first limiter can join the others (Redis limiters on
// one client), All is the limiter it returns: one step,
// all or nothing, for all of them. Otherwise the remote limiters asked
// last are joined so if the first of them can join the rest: All(memory,
// redisA, redisB), in any order given, asks memory and then both Redis
// limiters in one round trip, and Peeks them in one (its Admit, for an All
// of Alls, still asks them one by one).
//
// Every limiter except the last must implement Refunder (all of this module's
// limiters do). All panics if one does not, or if limiters is empty or holds
// a nil: programming errors, found when the program starts.
//
// The Result reports the binding limit: Allowed only if all allowed, the
// least Remaining with its Limit, the largest RetryAfter and ResetAfter (see
// Result.And, applied in the order given). A refusal's Result has the Limit
// of the limiter that refused, and covers the limiters asked and those
// that decide in process, not a remote one that was not asked (its Peek
// would be a round trip, TakeEach's included): its RetryAfter is the
// soonest the request can pass as far as they know. The
// limiter All returns also implements ContextLimiter,
// TakeEach (each limiter's Result) and PeekContext; under a context, it
// asks every limiter that takes one (the redislimit ones) under it, its Peeks included. It has Wait
// and WaitN too, which poll it as the package's WaitN polls a limiter
// without a WaitN of its own, on the clock of the first of limiters that
// has a clock of its own (every limiter of this module has), and reads
// that clock.
func All[K comparable](limiters ...Limiter[K]) Limiter[K] {
	if len(limiters) == 0 {
		panic("keylimit: All needs at least one limiter")
	}
	for i, l := range limiters {
		if l == nil {
			panic(fmt.Sprintf("keylimit: All: limiter %d is nil", i))
		}
		if i == len(limiters)-1 {
			break
		}
		if _, ok := l.(Refunder[K]); !ok {
			panic(fmt.Sprintf("keylimit: All: limiter %d (%T) cannot Refund; only the last limiter may lack a Refund method", i, l))
		}
	}
	if len(limiters) > 1 {
		if joined, ok := join(limiters); ok {
			return joined
		}
	}
	a := &all[K]{limiters: append([]Limiter[K](nil), limiters...), clock: systemClock,
		remote: make([]bool, len(limiters)), views: make([]views[K], len(limiters)), place: inProcess}
	places := make([]place, len(limiters))
	for i, l := range limiters {
		places[i] = placeOf(l)
		a.remote[i] = places[i] == remote
		a.place = max(a.place, places[i])
		v := &a.views[i]
		v.refunder, _ = l.(Refunder[K])
		v.contextRefunder, _ = l.(contextRefunder[K])
		v.contextTaker, _ = l.(contextTaker[K])
		v.partAdmitter = partOf[K](l)
	}
	a.order = a.askOrder(places)
	a.tail = a.joinTail(places)
	for _, l := range limiters {
		if clk := clockOf(l); clk != systemClock {
			a.clock = clk
			break
		}
	}
	return a
}

// eachTaker is a combination of limiters that reports the Result of each
// one: what All returns. The httplimit middleware uses it to send every
// policy's state without asking for it again.
type eachTaker[K comparable] interface {
	// TakeEach is TakeContext, and writes the Result of each limiter
	// combined into each, in order, if each is not nil (it must then have
	// one element per limiter). For a refused request, the Result of every
	// limiter but the one that refused is its Peek after the refund, but
	// for a remote limiter (its Stats say Remote): its Result is the zero
	// Result, Limit 0, which no limiter reports, so that a request refused
	// in process makes no round trip, and one refused remotely no more.
	TakeEach(ctx context.Context, key K, n int, each []Result) (Result, error)
}

// eachPeeker is a combination of limiters that Peeks them all in one step
// and reports each one's Peek: what join returns for the redislimit
// limiters (one script call). All's PeekContext uses it to
// Peek the Redis limiters it would ask last in one round trip.
type eachPeeker[K comparable] interface {
	// PeekEach is PeekContext, and writes each limiter's Peek into each,
	// in order, if each is not nil (it must then have one element per
	// limiter).
	PeekEach(ctx context.Context, key K, each []Result) (Result, error)
}

// join returns a limiter that decides for all of ls (ls[0] first) in one
// step, all or nothing, with All's semantics and Result, implementing
// ContextLimiter and eachTaker: what the package of ls[0] registered with
// internal/compose makes of them (redislimit's limiters on one client, one
// script call for several limits on one key); or false if none can join
// them all.
func join[K comparable](ls []Limiter[K]) (Limiter[K], bool) {
	if !compose.CanJoin() {
		return nil, false
	}
	as := make([]any, len(ls))
	for i, l := range ls {
		as[i] = l
	}
	j, ok := compose.Join(as)
	if !ok {
		return nil, false
	}
	joined, ok := j.(Limiter[K])
	return joined, ok
}

// all is the Limiter that All returns.
type all[K comparable] struct {
	limiters []Limiter[K]
	// order is the indexes of limiters in the order take asks them (see
	// askOrder); nil for the order given.
	order []int
	clock clock.Clock // the first limiter's own, or the system clock: WaitN sleeps on it
	// remote[i]: limiters[i] keeps its state in a remote store (its Stats
	// say Remote), so that its Peek is a round trip.
	remote []bool
	views  []views[K] // views[i] is limiters[i]'s, for take
	place  place      // the farthest of the limiters' places, for an All of Alls
	// tail, if not nil, decides the remote limiters take asks last in one
	// step (see joinTail).
	tail *joinedTail[K]
}

// joinedTail is the last limiters take asks, all remote, joined into one
// limiter (see join): Redis limiters on one client,
// decided in one round trip, after the limiters in process.
type joinedTail[K comparable] struct {
	at      int   // the position in the order asked of the first of them
	members []int // their indexes in limiters, in the order asked
	each    eachTaker[K]
	peek    eachPeeker[K] // the joined limiter's, or nil
	parts   sync.Pool     // of *[]Result, one per member, for takeTail and refused
}

// memberAt returns where limiters[i] is among the members, or -1 (and -1
// for a nil tail).
func (t *joinedTail[K]) memberAt(i int) int {
	if t == nil {
		return -1
	}
	return slices.Index(t.members, i)
}

// results returns a buffer of one Result per member, for put once done.
func (t *joinedTail[K]) results() *[]Result {
	part, _ := t.parts.Get().(*[]Result)
	if part == nil {
		part = new(make([]Result, len(t.members)))
	}
	return part
}

// place is where a limiter keeps its state, as far as All can tell: the
// greater, the farther.
type place uint8

const (
	inProcess place = iota // its Stats do not say Remote
	unknown                // it has no Stats
	remote                 // its Stats say Remote: each call is a round trip
)

// placeOf returns l's place: an All's is the farthest of its limiters'.
func placeOf[K comparable](l Limiter[K]) place {
	switch l := l.(type) {
	case *all[K]:
		return l.place
	case interface{ Stats() Stats }:
		if l.Stats().Remote {
			return remote
		}
		return inProcess
	}
	return unknown
}

// askOrder returns the order take asks the limiters in, their places
// given: first those in process that can Refund, then the others, each
// group in the order given; nil if that is the order given. A limiter
// without Refund can only be the last given, and stays last.
func (a *all[K]) askOrder(places []place) []int {
	order := make([]int, 0, len(places))
	for i, p := range places {
		if p == inProcess && a.views[i].refunder != nil {
			order = append(order, i)
		}
	}
	for i, p := range places {
		if p != inProcess || a.views[i].refunder == nil {
			order = append(order, i)
		}
	}
	for at, i := range order {
		if at != i {
			return order
		}
	}
	return nil
}

// joinTail returns the remote limiters that take asks last, joined, if
// there are two or more and the first of them can join the rest (see
// join); otherwise nil. A request then makes one round trip to them, not
// one each: All(memory, redisA, redisB) asks memory, then both Redis
// limiters in one script call.
func (a *all[K]) joinTail(places []place) *joinedTail[K] {
	at := len(places)
	for at > 0 && places[a.asked(at-1)] == remote {
		at--
	}
	if len(places)-at < 2 {
		return nil
	}
	t := &joinedTail[K]{at: at}
	ls := make([]Limiter[K], 0, len(places)-at)
	for pos := at; pos < len(places); pos++ {
		t.members = append(t.members, a.asked(pos))
		ls = append(ls, a.limiters[a.asked(pos)])
	}
	joined, ok := join(ls)
	if !ok {
		return nil
	}
	if t.each, ok = joined.(eachTaker[K]); !ok {
		return nil
	}
	t.peek, _ = joined.(eachPeeker[K])
	return t
}

// asked returns the index in limiters of the limiter take asks at-th.
func (a *all[K]) asked(at int) int {
	if a.order == nil {
		return at
	}
	return a.order[at]
}

// askedAt returns when take asks limiters[i]: the inverse of asked.
func (a *all[K]) askedAt(i int) int {
	if a.order == nil {
		return i
	}
	return slices.Index(a.order, i)
}

// views are the interfaces take asks a limiter through, asserted once by
// All: in generic code, an assertion to an interface looks its method table
// up on every request (about 150 instructions a limiter). Each is nil if
// the limiter does not implement it.
type views[K comparable] struct {
	refunder        Refunder[K]
	contextRefunder contextRefunder[K]
	contextTaker    contextTaker[K]
	partAdmitter    partAdmitter[K]
}

// contextTaker is a limiter with TakeContext (see takeContext).
type contextTaker[K comparable] interface {
	TakeContext(ctx context.Context, key K, n int) (Result, error)
}

// Allow is shorthand for AllowN(key, 1).
func (a *all[K]) Allow(key K) bool { return a.Take(key, 1).Allowed }

// AllowN is shorthand for Take(key, n).Allowed.
func (a *all[K]) AllowN(key K, n int) bool { return a.Take(key, n).Allowed }

// Take takes n from every limiter, or from none.
func (a *all[K]) Take(key K, n int) Result {
	r, _ := a.TakeEach(context.Background(), key, n, nil)
	return r
}

// TakeContext is Take under ctx, which every limiter that takes a context
// gets (see ContextLimiter).
func (a *all[K]) TakeContext(ctx context.Context, key K, n int) (Result, error) {
	return a.TakeEach(ctx, key, n, nil)
}

// inlineLimiters is how many limiters All decides for without allocating.
const inlineLimiters = 4

// TakeEach is TakeContext, reporting each limiter's Result (see eachTaker).
// The error is the first a limiter returned, or ctx's if it ended before
// every limiter was asked, in which case nothing is taken.
func (a *all[K]) TakeEach(ctx context.Context, key K, n int, each []Result) (Result, error) {
	r, _, err := a.take(ctx, key, n, each, nil)
	return r, err
}

// take takes n from every limiter or from none, reporting each one's
// Result in each if it is not nil, and, if record is not nil and the
// events are admitted, the admission of each limiter that can refund in
// record, in the order asked.
func (a *all[K]) take(ctx context.Context, key K, n int, each []Result, record *allAdmission[K]) (Result, Admission, error) {
	var buf [inlineLimiters]Admission
	adms := buf[:0]
	if len(a.limiters) > inlineLimiters {
		adms = make([]Admission, 0, len(a.limiters))
	}
	// In an order not the one given, each limiter's Result is kept, and
	// the admission's Result folded in the order given, as Result.And's
	// ties (Limit, Err) want it.
	rs := each
	if rs == nil && a.order != nil {
		var rbuf [inlineLimiters]Result // here, so the order given does not zero it
		rs = rbuf[:]
		if len(a.limiters) > inlineLimiters {
			rs = make([]Result, len(a.limiters))
		}
	}
	var sum Result
	var firstErr error
	for at := range a.limiters {
		i := a.asked(at)
		if err := ctx.Err(); err != nil {
			a.undo(ctx, key, adms)
			return Result{Limit: sum.Limit, RetryAfter: sum.RetryAfter}, Admission{}, err
		}
		if t := a.tail; t != nil && at == t.at && record == nil {
			// The remote limiters left, in one step, last: nothing after
			// them to refund them for.
			r, err := a.takeTail(ctx, key, n, rs)
			if firstErr == nil {
				firstErr = err
			}
			if !r.Allowed {
				a.undo(ctx, key, adms)
				return a.refused(ctx, key, byTail, r, each), Admission{}, firstErr
			}
			if at == 0 {
				sum = r
			} else {
				sum = sum.And(r)
			}
			break
		}
		var r Result
		var err error
		// As admitContext and takeContext ask, through the views.
		switch v := &a.views[i]; {
		case v.refunder != nil && (at < len(a.limiters)-1 || record != nil):
			var adm Admission
			switch {
			case v.partAdmitter != nil:
				// Refunded at most once, by undo or by Refund of the
				// record's once: no once of its own to allocate.
				r, adm, err = v.partAdmitter.admitPart(ctx, key, n)
			case v.contextRefunder != nil:
				r, adm, err = v.contextRefunder.AdmitContext(ctx, key, n)
			default:
				r, adm = v.refunder.Admit(key, n)
			}
			adms = append(adms, adm)
		case v.contextTaker != nil:
			r, err = v.contextTaker.TakeContext(ctx, key, n)
		default:
			r = a.limiters[i].Take(key, n)
		}
		if firstErr == nil {
			firstErr = err
		}
		if rs != nil {
			rs[i] = r
		}
		if !r.Allowed {
			a.undo(ctx, key, adms[:min(at, len(adms))])
			return a.refused(ctx, key, i, r, each), Admission{}, firstErr
		}
		if at == 0 {
			sum = r
		} else {
			sum = sum.And(r)
		}
	}
	if a.order != nil {
		sum = rs[0]
		for _, r := range rs[1:len(a.limiters)] {
			sum = sum.And(r)
		}
	}
	if record == nil {
		return sum, Admission{}, firstErr
	}
	record.key = key
	record.parts = append([]Admission(nil), adms...) // a copy: adms may be on this stack
	return sum, Admission{N: n, By: a, state: record, once: &record.once, slot: uint64(min(max(n, 0), maxOnceN)) << 6}, firstErr
}

// allAdmission is the state of an Admission of All: the admission of each
// limiter that can refund, in the order asked, refunded once, under key
// only.
type allAdmission[K comparable] struct {
	key   K
	parts []Admission
	once  onceBlock // its slot 0 is the Admission's
}

// undo refunds adms, the admissions of the first limiters asked, in
// reverse order. A refund must happen even if ctx has ended, or the events
// would stay taken: it keeps ctx's values (for tracing) but not its end.
func (a *all[K]) undo(ctx context.Context, key K, adms []Admission) {
	if len(adms) == 0 {
		return
	}
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	for at := len(adms) - 1; at >= 0; at-- {
		refundContext(ctx, a.views[a.asked(at)].refunder, key, adms[at])
	}
}

// byTail is refused's i for a refusal by the joined tail.
const byTail = -1

// refused reports a refusal by limiter i, which answered r, or by the
// joined tail (i is byTail; r is then the combination of its limiters'
// Results, which takeTail wrote into each): the others, none of which
// holds anything of this request now, are asked what they would say, under
// ctx if they take one. A remote one is not (its Peek would be a round trip
// for a request already refused, in process if it was not asked: those
// are asked first), each wanting its Result or not: its Result in each is
// the zero Result (see eachTaker).
func (a *all[K]) refused(ctx context.Context, key K, i int, r Result, each []Result) Result {
	sum := r
	for j := range a.limiters {
		if j == i || i == byTail && a.tail.memberAt(j) >= 0 {
			continue
		}
		if a.remote[j] {
			if each != nil {
				each[j] = Result{}
			}
			continue
		}
		p := a.peekOf(ctx, key, j, nil)
		if each != nil {
			each[j] = p
		}
		sum = sum.And(p)
	}
	sum.Allowed, sum.Limit = false, r.Limit
	return sum
}

// peekTail Peeks the joined tail's limiters in one step, into a buffer of
// the tail's to put back once done; nil if there is no tail that can.
func (a *all[K]) peekTail(ctx context.Context, key K) *[]Result {
	t := a.tail
	if t == nil || t.peek == nil {
		return nil
	}
	part := t.results()
	_, _ = t.peek.PeekEach(ctx, key, *part) // as peekContext: on an error, a failure policy's Peeks
	return part
}

// peekOf returns limiters[i]'s Peek: from tail (peekTail's) if it is one of
// the tail's, else its own.
func (a *all[K]) peekOf(ctx context.Context, key K, i int, tail []Result) Result {
	if k := a.tail.memberAt(i); tail != nil && k >= 0 {
		return tail[k]
	}
	return peekContext(ctx, a.limiters[i], key)
}

// takeTail takes n from the joined tail's limiters in one step, and writes
// each one's Result into rs, if not nil, at its index in limiters.
func (a *all[K]) takeTail(ctx context.Context, key K, n int, rs []Result) (Result, error) {
	t := a.tail
	if rs == nil {
		return t.each.TakeEach(ctx, key, n, nil)
	}
	// The tail's Results, from a pool: a buffer on this stack would escape
	// through the interface call, an allocation a request.
	part := t.results()
	defer t.parts.Put(part)
	r, err := t.each.TakeEach(ctx, key, n, *part)
	for k, i := range t.members {
		rs[i] = (*part)[k]
	}
	return r, err
}

// Peek reports what Take(key, 1) would answer now, taking nothing.
func (a *all[K]) Peek(key K) Result {
	r, _ := a.PeekContext(context.Background(), key)
	return r
}

// PeekContext is Peek under ctx, for the limiters that take one (the
// redislimit ones). It returns ctx's error if ctx has ended, asking none.
func (a *all[K]) PeekContext(ctx context.Context, key K) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var tail []Result // the joined tail's Peeks, in one step
	if part := a.peekTail(ctx, key); part != nil {
		defer a.tail.parts.Put(part)
		tail = *part
	}
	var sum Result
	decider, deciderAt := 0, len(a.limiters) // the Limit of the first limiter take would find refusing
	for i := range a.limiters {
		r := a.peekOf(ctx, key, i, tail)
		if i == 0 {
			sum = r
		} else {
			sum = sum.And(r)
		}
		if !r.Allowed {
			if at := a.askedAt(i); at < deciderAt {
				decider, deciderAt = r.Limit, at
			}
		}
	}
	if decider != 0 {
		sum.Limit = decider
	}
	return sum, nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (a *all[K]) Wait(ctx context.Context, key K) error { return a.WaitN(ctx, key, 1) }

// WaitN blocks until every limiter admits n events for key, and takes them
// from all: it asks, and when refused, sleeps for the RetryAfter of the
// combination (the largest) and asks again (see the package's WaitN).
func (a *all[K]) WaitN(ctx context.Context, key K, n int) error {
	return waitN[K](ctx, a, a.clock, key, n)
}

// timers is the clock WaitN sleeps on.
func (a *all[K]) timers() clock.Clock { return a.clock }

// Reset resets key in every limiter.
func (a *all[K]) Reset(key K) {
	for _, l := range a.limiters {
		l.Reset(key)
	}
}

// Admit is Take, and also returns what the admission took from each
// limiter, for Refund, so that a combination can be one limiter of another.
// It allocates the record of the admissions.
func (a *all[K]) Admit(key K, n int) (Result, Admission) {
	r, adm, _ := a.take(context.Background(), key, n, nil, new(allAdmission[K]))
	return r, adm
}

// AdmitContext is Admit under ctx, for the limiters that take one.
func (a *all[K]) AdmitContext(ctx context.Context, key K, n int) (Result, Admission, error) {
	return a.take(ctx, key, n, nil, new(allAdmission[K]))
}

// Refund gives back each limiter's part of adm, an Admission of this
// combination made for key, once.
func (a *all[K]) Refund(key K, adm Admission) { _ = a.RefundContext(context.Background(), key, adm) }

// RefundContext is Refund under ctx, for the limiters that take one. It
// returns ctx's error if ctx ended before every part was given back.
func (a *all[K]) RefundContext(ctx context.Context, key K, adm Admission) error {
	rec, ok := adm.state.(*allAdmission[K])
	if !ok || !madeBy(adm.By, a) || rec.key != key {
		return nil
	}
	n, ok := adm.claim()
	if !ok {
		return nil
	}
	for at, p := range rec.parts {
		if r := a.views[a.asked(at)].refunder; r != nil {
			p.N = min(p.N, n) // a partial refund of adm is one of each part
			refundContext(ctx, r, key, p)
		}
	}
	return ctx.Err()
}

var (
	_ Limiter[string]        = (*all[string])(nil)
	_ Refunder[string]       = (*all[string])(nil)
	_ ContextLimiter[string] = (*all[string])(nil)
	_ eachTaker[string]      = (*all[string])(nil)
)
