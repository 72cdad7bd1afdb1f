package keylimit

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Stats is what a limiter has counted since it was made, for metrics: see
// the Stats method of each limiter, and the metrics module for Prometheus.
// Every count only grows, except Keys and Waiting.
type Stats struct {
	// Decisions reports that the limiter counts Admitted and Refused (an
	// in-memory one made WithStats; a remote one always). Remote reports a
	// limiter whose state is in a remote store: it counts Calls, Errors,
	// Fallbacks and CacheHits, and not Keys, Untracked or Evicted. Penalty
	// reports a Penalty (or a Redis one), which counts Bans and BanRefused.
	// Adaptive reports an adaptive.Limiter, which reports Limit and
	// counts Shed.
	// A count a limiter does not keep reads 0.
	Decisions, Remote, Penalty, Adaptive bool

	// Keys is the number of keys tracked now.
	Keys int
	// Admitted and Refused count requests (calls of Allow, AllowN, Take,
	// Wait's last try), not events. They are counted only by a limiter
	// made with WithStats, and are 0 otherwise.
	Admitted, Refused uint64
	// Untracked counts requests for keys the key cap left untracked
	// (WithMaxKeys); each is in Admitted or Refused too, when counted.
	Untracked uint64
	// Evicted counts idle keys forgotten by the evictor or at the key cap.
	Evicted uint64

	// Reclaimed counts the slots a Concurrency took back from holds past
	// its longest hold (WithMaxHold), and Waiting is the number of its
	// Acquire calls waiting now; a rate limiter leaves them 0.
	Reclaimed uint64
	Waiting   int

	// Limit is the limit now: an adaptive.Limiter's overall limit, which moves, or
	// a Concurrency's N. A rate limiter leaves it 0.
	Limit int
	// Shed counts the requests an adaptive.Limiter refused, by their Criticality
	// (Shed[Critical], Shed[Default], Shed[Sheddable]); other limiters
	// leave it 0.
	Shed [3]uint64

	// Bans counts the bans a Penalty started, and BanRefused the requests
	// it refused by a ban without asking its limiter (each in Refused too,
	// when Decisions is set); other limiters leave them 0.
	Bans, BanRefused uint64
	// Watched is the number of keys a Penalty keeps a state for: those
	// refused within Ban.Within, and those banned (WithMaxKeys caps it).
	Watched int

	// Calls, Errors, Fallbacks and CacheHits count a remote store's work
	// (the redislimit module); an in-memory limiter leaves them 0. Calls
	// are decisions asked of the store (a joined one counts once; those
	// that share a pipeline or a script call count one each), Errors the
	// ones that failed, Fallbacks the
	// decisions made by a failure policy instead, and CacheHits the
	// refusals answered from memory without a round trip.
	Calls, Errors, Fallbacks, CacheHits uint64
	// ScriptErrors counts the round trips whose script failed on the
	// server (redislimit.ErrScript: a bug or an incompatibility of the
	// server's Lua, not an outage), which Errors does not count.
	ScriptErrors uint64
}

// WithStats makes the limiter count the requests it admits and refuses, for
// Stats. Without it, Stats reports keys, evictions and untracked requests,
// which cost nothing on the hot path. With it, each decision adds one to a
// counter striped across CPUs (an atomic add, 1-2 ns; see "What WithStats
// costs" in benchmarks/NOTES.md), and a refusal writes to shared memory,
// which one without WithStats never does.
func WithStats() Option {
	return optionFunc(func(o *options) { o.stats = true })
}

// shardStats is what a shard counts for Stats.
type shardStats struct {
	evicted, untracked atomic.Uint64
	// decisions counts admissions and refusals; nil without WithStats.
	decisions *stripedCounts
}

// admits reports whether a decision with verdict v admits, o deciding for
// an untracked key, and counts it if anything counts it (see Stats). It is
// the one place the hot paths turn a verdict into an answer. It is not a
// method of the generic shard because a generic method is not inlined into
// a generic caller, and the call would cost a fifth of an Allow; this one
// is (go build -gcflags=-m: "inlining call to (*shardStats).admits"), and
// without WithStats costs two compares.
func (st *shardStats) admits(v verdict, o overflowPolicy) bool {
	if st.decisions == nil && v != untracked {
		return v == admitted
	}
	return st.record(v, o)
}

// count counts a decision with verdict v, o deciding for an untracked key,
// if anything counts it: admits for a decision that returns its verdict
// to a caller that tells admission by allows.
func (st *shardStats) count(v verdict, o overflowPolicy) {
	if st.decisions != nil || v == untracked {
		st.record(v, o)
	}
}

// allows reports whether a decision with verdict v admits, o deciding for
// an untracked key: admits without the counting, for a hot path whose
// decision counted itself.
func (o overflowPolicy) allows(v verdict) bool {
	return v == admitted || v == untracked && o == admitUntracked
}

// record is admits' slow path.
func (st *shardStats) record(v verdict, o overflowPolicy) bool {
	ok := o.allows(v)
	if v == untracked {
		st.untracked.Add(1)
	}
	if c := st.decisions; c != nil {
		c.add(ok)
	}
	return ok
}

// stripedCounts counts admissions and refusals on stripes, so that
// goroutines on different CPUs, even deciding one hot key, rarely add to the
// same cache line.
type stripedCounts struct {
	stripes []countStripe
	mask    uint32
}

// countStripe is one stripe, alone on its cache line (two lines, against
// adjacent-line prefetch).
type countStripe struct {
	admitted, refused atomic.Uint64
	_                 [112]byte
}

func newStripedCounts() *stripedCounts {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	return &stripedCounts{stripes: make([]countStripe, n), mask: uint32(n - 1)}
}

func (c *stripedCounts) add(admitted bool) {
	// The stripe is the goroutine's: the address of its stack, which the
	// runtime hands out from per-P caches and moves only when it grows.
	// A goroutine then adds to one cache line, which stays in its CPU's
	// cache; a stripe chosen at random per call moved between the CPUs'
	// caches on every other add (34 ns more per Allow, keys=1e4 parallel).
	var here byte
	sp := uint32(uintptr(unsafe.Pointer(&here)) >> 13)
	s := &c.stripes[(sp^sp>>7)&c.mask]
	if admitted {
		s.admitted.Add(1)
	} else {
		s.refused.Add(1)
	}
}

// sum returns the counts so far. Concurrent adds may or may not be in it.
func (c *stripedCounts) sum() (admitted, refused uint64) {
	for i := range c.stripes {
		admitted += c.stripes[i].admitted.Load()
		refused += c.stripes[i].refused.Load()
	}
	return admitted, refused
}

// stats returns the shard's Stats.
func (s *shard[K, S]) stats() Stats {
	st := Stats{
		Keys:      s.len(),
		Untracked: s.counts.untracked.Load(),
		Evicted:   s.counts.evicted.Load(),
	}
	if c := s.counts.decisions; c != nil {
		st.Decisions = true
		st.Admitted, st.Refused = c.sum()
	}
	return st
}
