// Package keystore carries keylimit's keyed store to the limiter of
// another package of this module that stands on it, package adaptive's:
// the store (keylimit's shard: the map of per-key states, the key cap,
// what Stats counts), its evictor, its clock, and the pooled records of
// the Permits it hands out are keylimit's, unexported, as they are for
// keylimit's own limiters, and keylimit lends them through Lend, which it
// sets from an init function. The borrower hashes its keys itself (it
// alone knows their type) and makes, judges and retires its keys' states
// by its Hooks; the store keeps them as opaque pointers.
package keystore

import (
	"math"
	"time"
	"unsafe"
)

// Hooks are what the store needs of a borrower's per-key state (see
// keylimit's stateHooks, whose contract they keep).
type Hooks struct {
	// New returns the state of a key never seen, or forgotten.
	New func() unsafe.Pointer
	// RetireIfIdle retires p if, at now, it is indistinguishable from
	// New's, deciding and retiring in one CAS, and reports whether it did;
	// if not, it returns the earliest time p could be idle (MaxTime: not
	// before something releases).
	RetireIfIdle func(p unsafe.Pointer, now int64) (retired bool, idleAt int64)
}

// Lend, set by keylimit's init, returns a keyed store built with opts (a
// []keylimit.Option: an error for an invalid one, or for WithMaxHold) for
// states that hooks make and retire, as two values. store is what the
// borrower's decisions call (the methods of package adaptive's store
// interface); owner, whose Close() error stops the evictor, must be held
// by the borrower's limiter alone: once it is unreachable, its evictor
// stops, as a keylimit limiter's does once the limiter is. capped says
// that a key cap (WithMaxKeys) is set.
var Lend func(opts any, hooks Hooks) (store, owner any, capped bool, err error)

// Release, set by the borrower's init, gives back the n slots of state st
// of the borrower's core, acquired at at (the store's time), as a success
// or dropped (Permit.Drop): a Permit's first Release or Drop of a record
// the store made for the borrower calls it once.
var Release func(core, st unsafe.Pointer, n, at int64, drop bool)

// Verdict is what a limiter's decision answers, for the store to count
// (Stats) and to turn into an answer.
type Verdict uint8

const (
	Admitted  Verdict = iota
	Refused           // not now
	Never             // n above the key's quota, or its limit is invalid
	Untracked         // the key cap left no place for the key
)

const (
	// MinTime, in the store's nextIdle, says that when a key may next be
	// idle is unknown (a sweep at the key cap may find room).
	MinTime = math.MinInt64
	// MaxTime, as an idleAt, says never, until something else happens.
	MaxTime = math.MaxInt64
	// MaxSpan is the longest span a limiter computes with, 2^60 ns (about
	// 36 years): every sum of times it forms stays below 2^62.
	MaxSpan = time.Duration(1 << 60)
)
