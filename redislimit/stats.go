package redislimit

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"

	"github.com/keylimit/keylimit"
)

// Stats returns what the limiter has counted since it was made: Admitted and
// Refused count requests (Allow, AllowN, Take, Admit, each try of Wait),
// always; Calls the round trips to Redis of decisions, leases (fetched and
// given back), Peeks, Refunds and Resets (not Ping's, nor the eviction
// check's), and Errors those that failed; Fallbacks the requests and Peeks
// the failure policy answered (during a failure and the backoff after it);
// CacheHits those the deny cache answered. Keys is 0: the keys live in Redis, which the limiter does
// not count (Untracked and Evicted are 0 too). Counts read while calls run
// may or may not include them.
func (l *limiter) Stats() keylimit.Stats {
	c := &l.ops.counts
	st := keylimit.Stats{Decisions: true, Remote: true}
	for i := range c.stripes {
		s := &c.stripes[i]
		st.Admitted += s.admitted.Load()
		st.Refused += s.refused.Load()
		st.Fallbacks += s.fallbacks.Load()
		st.CacheHits += s.hits.Load()
	}
	st.Calls, st.Errors = c.calls.Load(), c.errors.Load()
	return st
}

// counts is what a limiter counts for Stats. What a call in process can
// count (a refusal from the deny cache, a fallback decision) is striped
// across CPUs, so that goroutines deciding one hot key rarely add to the
// same cache line; what a round trip counts is not: the round trip dwarfs
// the add.
type counts struct {
	stripes       []countStripe
	mask          uint32
	calls, errors atomic.Uint64
}

// countStripe is one stripe, alone on its cache line (two lines, against
// adjacent-line prefetch).
type countStripe struct {
	admitted, refused, fallbacks, hits atomic.Uint64
	_                                  [96]byte
}

func (c *counts) init() {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	c.stripes, c.mask = make([]countStripe, n), uint32(n-1)
}

// stripe returns a stripe chosen at random: rand.Uint32 reads a per-thread
// generator, takes no lock and allocates nothing.
func (c *counts) stripe() *countStripe {
	return &c.stripes[rand.Uint32()&c.mask]
}

// decided counts a request's verdict.
func (c *counts) decided(allowed bool) {
	s := c.stripe()
	if allowed {
		s.admitted.Add(1)
	} else {
		s.refused.Add(1)
	}
}

// fallbacks returns how many calls the failure policy has answered.
func (c *counts) fallbacks() uint64 {
	var n uint64
	for i := range c.stripes {
		n += c.stripes[i].fallbacks.Load()
	}
	return n
}
