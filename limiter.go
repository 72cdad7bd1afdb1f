package keylimit

import (
	"context"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Limiter is what every keyed limiter in this module does: TokenBucket,
// FixedWindow, SlidingWindow, SlidingCounter, the Redis limiters of the
// redislimit module, and combinations of them made by All.
//
// Implementations are safe for concurrent use.
type Limiter[K comparable] interface {
	// Allow reports whether one event for key may happen now, and records it
	// if so. It is shorthand for AllowN(key, 1).
	Allow(key K) bool
	// AllowN reports whether n events for key may happen now, and records
	// all n if so; otherwise it records nothing.
	AllowN(key K, n int) bool
	// Take records n events for key if all n fit, else nothing, and reports
	// the decision and the key's state after it.
	Take(key K, n int) Result
	// Peek reports the key's state now, recording nothing. Its Allowed says
	// whether Allow(key) would pass.
	Peek(key K) Result
	// Reset forgets key: its next event meets a full quota.
	Reset(key K)
}

// ContextLimiter is a Limiter whose decisions can wait on something outside
// the process, such as the Redis limiters of the redislimit module, and so
// take a context: it admits, peeks and refunds under one. All, WaitN, quota
// and the httplimit middleware and Transport use these methods when a
// limiter has them (each is asked for on its own, so a limiter may have
// only some).
type ContextLimiter[K comparable] interface {
	Limiter[K]
	Refunder[K]
	// TakeContext is Take under ctx. A ctx that has ended when it is called
	// makes no decision: the Result is refused and the error is ctx's. A
	// non-nil error otherwise says why the decision is not the limit's own
	// (a failure policy answered while the store failed).
	TakeContext(ctx context.Context, key K, n int) (Result, error)
	// PeekContext is Peek under ctx.
	PeekContext(ctx context.Context, key K) (Result, error)
	// AdmitContext is Admit under ctx, as TakeContext is Take.
	AdmitContext(ctx context.Context, key K, n int) (Result, Admission, error)
	// RefundContext is Refund under ctx.
	RefundContext(ctx context.Context, key K, a Admission) error
}

// Admission is what one admitted request took from a limiter: how many
// events, and where the limiter counted them. Refund takes it to give back
// exactly what the admission still holds, once: copies of an Admission are
// the same admission. The zero Admission, a refused request's, gives back
// nothing.
type Admission struct {
	// N is the number of events admitted.
	N int
	// Mark is where the limiter counted them, in its own terms (the TAT a
	// bucket's admission wrote, the window a window counted in, the time a
	// sliding log recorded). Only the limiter that made it reads it.
	Mark int64
	// By is the limiter that made it. Refund ignores an Admission another
	// limiter made; a limiter that wraps others (All, a Redis limiter with
	// its in-process fallback) tells by it whose Admission it holds.
	By any
	// What the in-memory limiters check on Refund: the key's state the
	// events were counted in, the key (its hash, in the limiter's seed),
	// the limiter's count of Resets before the admission, and the unit Mark
	// counts in (a bucket's interval, a window's period).
	state any
	key   uint64
	epoch uint64
	unit  int64
	// once and slot are what the copies of an admitted Admission share, so
	// that only the first Refund of any of them gives back: bit slot&63 of
	// once.done, set by that Refund, and slot>>6, what the admission took
	// (at most maxOnceN), above which no copy gives back (a raised N is
	// ignored, as on Redis). Admit takes the slot from its limiter's
	// onces; once is nil in the Admissions this package makes for its own
	// use (see partAdmitter) and never hands out.
	once *onceBlock
	slot uint64
}

// onceBlock is the once of the Refunds of up to 64 in-memory admissions:
// bit i of done is set by the first Refund of the admission handed slot i,
// or of any copy of it. Blocks are handed out by onces, one slot an
// admission; a block lives as long as an Admission of it does. 16 bytes,
// with no pointers.
type onceBlock struct {
	done atomic.Uint64
	next atomic.Uint64 // slots taken; those from 64 on are not in the block
}

// maxOnceN is the most events an Admission's slot records: a Refund of
// one that took more gives back at most this many (2^57 − 1).
const maxOnceN = 1<<57 - 1

// onces hands out the slots of Admissions' onces (Admission.once) for one
// limiter: a slot is one atomic add on the current block of a stripe, and
// a new block of 16 bytes is allocated every 64 slots of a stripe. So an
// Admit allocates 1/64 of a block where a once of its own cost an
// allocation every time. A key's admissions use the stripe of its hash;
// there are a few stripes per processor, each on its own cache line, so
// that admissions of different keys rarely write the same line.
type onces struct {
	stripes []onceStripe
	mask    uint64
}

type onceStripe struct {
	cur atomic.Pointer[onceBlock]
	_   [cacheLine - 8]byte
}

// cacheLine is the size the stripes of onces are padded to.
const cacheLine = 64

// init makes 4 stripes per processor, at least 8 and at most 256: 512
// bytes to 16 KiB a limiter.
func (o *onces) init() {
	n := 8
	for n < 4*runtime.GOMAXPROCS(0) && n < 256 {
		n *= 2
	}
	o.stripes = make([]onceStripe, n)
	o.mask = uint64(n - 1)
}

// take returns the once and slot (Admission.once, Admission.slot) of an
// admission of n >= 1 events of the key whose hash is h. Allow and Take
// make no Admission and take no slot.
func (o *onces) take(h uint64, n int) (*onceBlock, uint64) {
	if b := o.stripes[h&o.mask].cur.Load(); b != nil {
		if i := b.next.Add(1) - 1; i < 64 {
			return b, uint64(min(n, maxOnceN))<<6 | i
		}
	}
	return o.takeNew(h, n)
}

// takeNew is take when the stripe's block is full (or there is none yet):
// it puts a new block in, taking its first slot, unless another admission
// did first.
func (o *onces) takeNew(h uint64, n int) (*onceBlock, uint64) {
	s := &o.stripes[h&o.mask]
	for {
		b := s.cur.Load()
		if b != nil {
			if i := b.next.Add(1) - 1; i < 64 {
				return b, uint64(min(n, maxOnceN))<<6 | i
			}
		}
		nb := new(onceBlock)
		nb.next.Store(1)
		if s.cur.CompareAndSwap(b, nb) {
			return nb, uint64(min(n, maxOnceN)) << 6
		}
	}
}

// claim is the once of a Refund of a, which the caller has found to be its
// own and of its key: it reports false if a Refund of a or of a copy of it
// came first, and otherwise returns what the Refund may give back: a.N, at
// most what the admission took. An Admission without a once is one this
// package made for its own use, which its maker refunds at most once.
func (a *Admission) claim() (int, bool) {
	o := a.once
	if o == nil {
		return a.N, true
	}
	bit := uint64(1) << (a.slot & 63)
	if o.done.Or(bit)&bit != 0 {
		return 0, false
	}
	return min(a.N, int(a.slot>>6)), true
}

// madeBy reports whether by, an Admission's By, is lim, a limiter of this
// package (a pointer): by == lim, compared word by word, which for a
// pointer is equality. (In generic code, by == lim calls
// runtime.efaceeq.)
func madeBy(by, lim any) bool {
	type eface struct{ typ, data unsafe.Pointer }
	x, y := (*eface)(unsafe.Pointer(&by)), (*eface)(unsafe.Pointer(&lim))
	return x.typ == y.typ && x.data == y.data
}

// partAdmitter is implemented by this package's limiters that make
// Admissions: admitPart is AdmitContext without the once-state (see
// Admission.once), so that it allocates nothing. It is for All, which
// asks for the admission of each limiter but the last on every request,
// refunds each at most once itself, and never hands one out.
type partAdmitter[K comparable] interface {
	admitPart(ctx context.Context, key K, n int) (Result, Admission, error)
}

// partOf returns l as a partAdmitter if it is one of this package's
// limiters itself, else nil. A type that embeds one has the method too, but
// its own Admit (one that counts or logs, say) is the one to ask.
func partOf[K comparable](l any) partAdmitter[K] {
	switch l := l.(type) {
	case *TokenBucket[K]:
		return l
	case *FixedWindow[K]:
		return l
	case *SlidingWindow[K]:
		return l
	case *SlidingCounter[K]:
		return l
	case *Penalty[K]:
		return l
	}
	return nil
}

// Refunder is implemented by limiters whose admissions can be given back
// exactly. All uses it to undo what the limiters before a refusing one
// took; every limiter of this module and of redislimit implements it.
type Refunder[K comparable] interface {
	// Admit is Take, and also returns what an admission took, for Refund.
	// A refused request's Admission is the zero Admission.
	Admit(key K, n int) (Result, Admission)
	// Refund gives back what a, an Admission this limiter made for key,
	// still holds, and never more: events whose window has ended, whose log
	// entries have left the window, or whose tokens have refilled since are
	// not given back, so that however late the refund, no interval ever
	// admits more than the limit. A Refund after a change of limit that
	// moved the key may give back nothing, and so does one with an
	// Admission made for another key (this module's limiters and
	// redislimit's check it). An Admission is refunded once: a second
	// Refund of it, or of any copy of it, gives back nothing, in memory as
	// on Redis.
	//
	// A copy of a whose N is lowered to k gives back at most k of its
	// events, by the same rule: a partial refund, of what an outcome did
	// not charge (quota's Policy.Charge); it is the admission's one Refund.
	// Lowering N is the one change a caller may make to an Admission; a
	// raised N is ignored: no Refund gives back more than was admitted.
	Refund(key K, a Admission)
}

var (
	_ Refunder[string] = (*TokenBucket[string])(nil)
	_ Refunder[string] = (*FixedWindow[string])(nil)
	_ Refunder[string] = (*SlidingWindow[string])(nil)
	_ Refunder[string] = (*SlidingCounter[string])(nil)
)
