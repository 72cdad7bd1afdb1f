package adaptive

import (
	"fmt"
	"hash/maphash"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/keystore"
	"github.com/keylimit/keylimit/internal/spin"
)

// A Limiter stands on keylimit's keyed store, evictor, clock and pooled
// Permit records, as keylimit's own limiters do (the map of per-key states,
// the key cap, eviction, what Stats counts: every option but WithMaxHold
// means here what it means there). keylimit lends them through
// internal/keystore.Lend, keyed by a hash of each key taken here, its
// states made and retired here; this file types them again.

// store is what keylimit lends (its lentStore); h is always a key's hash
// (shard.hash), and a state an *adState.
type store interface {
	LoadOrCreate(h uint64) unsafe.Pointer
	Load(h uint64) unsafe.Pointer
	Replace(h uint64, old unsafe.Pointer) unsafe.Pointer
	Untracked(quota, n int) keylimit.Result
	Impossible(r keylimit.Result, n int) keylimit.Result
	Admits(v keystore.Verdict) bool
	Stats() keylimit.Stats
	Now() int64
	Timers() clock.Clock
	Counted() bool
	NextIdle() *atomic.Int64
	Permit(core, st unsafe.Pointer, n int64) keylimit.Permit
}

// shard is a Limiter's keys: the lent store, for keys of type K and states
// of type S.
type shard[K comparable, S any] struct {
	seed  maphash.Seed
	lent  store
	clock timeSource // lent, as a clock
	// nextIdle is the store's: storing minTime in it says a key went idle.
	nextIdle *atomic.Int64
	capped   bool // a key cap (WithMaxKeys) is set
	counted  bool // decisions are counted (WithStats)
}

// stateHooks are what the store needs of a key's state (keystore.Hooks).
type stateHooks[K comparable, S any] struct {
	newState     func() *S
	retireIfIdle func(p *S, now int64) (retired bool, idleAt int64)
}

// newShard borrows a store built with opts for states hooks make and
// retire. owner stops its evictor: the limiter alone holds it (see
// keystore.Lend).
func newShard[K comparable, S any](opts []keylimit.Option, hooks stateHooks[K, S]) (*shard[K, S], io.Closer, error) {
	st, owner, capped, err := keystore.Lend(opts, keystore.Hooks{
		New: func() unsafe.Pointer { return unsafe.Pointer(hooks.newState()) },
		RetireIfIdle: func(p unsafe.Pointer, now int64) (bool, int64) {
			return hooks.retireIfIdle((*S)(p), now)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	lent := st.(store)
	s := &shard[K, S]{seed: maphash.MakeSeed(), lent: lent, nextIdle: lent.NextIdle(), capped: capped, counted: lent.Counted()}
	s.clock = timeSource{store: lent, timers: lent.Timers()}
	return s, owner.(io.Closer), nil
}

func (s *shard[K, S]) hash(key K) uint64 { return maphash.Comparable(s.seed, key) }

// loadOrCreate returns the state of key, creating it if it is missing, or
// nil if the key cap leaves the key untracked.
func (s *shard[K, S]) loadOrCreate(key K) *S {
	return (*S)(s.lent.LoadOrCreate(s.hash(key)))
}

// load returns the state of key, or nil.
func (s *shard[K, S]) load(key K) *S { return (*S)(s.lent.Load(s.hash(key))) }

// replace swaps the retired state old of key for a fresh one, and returns
// the state now mapped (nil if the key cap has no place left).
func (s *shard[K, S]) replace(key K, old *S) *S {
	return (*S)(s.lent.Replace(s.hash(key), unsafe.Pointer(old)))
}

// untracked is the Result of a request of n for a key the key cap leaves
// untracked, quota its Limit.
func (s *shard[K, S]) untracked(quota, n int) keylimit.Result {
	return s.lent.Untracked(quota, n)
}

// impossible is the Result of a request that needs no decision (n == 0,
// or n that can never pass), from r, a Peek of its key.
func (s *shard[K, S]) impossible(r keylimit.Result, n int) keylimit.Result {
	return s.lent.Impossible(r, n)
}

// admits counts a decision of verdict v for Stats, and reports whether it
// admits. Without WithStats only an untracked key's is counted, and the
// answer is given here, as keylimit's shardStats.admits gives it, without
// a call to the store.
func (s *shard[K, S]) admits(v verdict) bool {
	if !s.counted && v != untracked {
		return v == admitted
	}
	return s.lent.Admits(v)
}

// stats is what the store has counted: keys, evictions, decisions.
func (s *shard[K, S]) stats() keylimit.Stats { return s.lent.Stats() }

// timeSource is the lent store, as the limiter's core sees it: its clock
// (now, and timers, WithClock's or the system's) and the Permits it hands
// out.
type timeSource struct {
	store
	timers clock.Clock
}

// now is the store's time, in ns since its creation.
func (t *timeSource) now() int64 { return t.Now() }

// A Permit's first Release or Drop of a record the store made gives its
// slots back here.
func init() {
	keystore.Release = func(core, st unsafe.Pointer, n, at int64, drop bool) {
		(*adCore)(core).release((*adState)(st), n, at, drop)
	}
}

// The store's names for a decision's verdict, its times and spans.
type verdict = keystore.Verdict

const (
	admitted  = keystore.Admitted
	refused   = keystore.Refused
	never     = keystore.Never
	untracked = keystore.Untracked

	minTime = keystore.MinTime
	maxTime = keystore.MaxTime
	maxSpan = keystore.MaxSpan
)

// backoff is what a call that lost a compare-and-swap does before it tries
// again, as keylimit's limiters do.
type backoff = spin.Backoff

// slots formats a count of slots: "1 slot", "3 slots".
func slots(n int) string {
	if n == 1 {
		return "1 slot"
	}
	return fmt.Sprintf("%d slots", n)
}
