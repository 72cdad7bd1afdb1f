package redislimit

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"

	"github.com/keylimit/keylimit"
)

// counts is what a limiter counts for Stats. What a call in process can
// count (a refusal from the deny cache, a fallback decision) is striped
// across CPUs, so that goroutines deciding one hot key rarely add to the
// same cache line; what a round trip counts is not: the round trip dwarfs
// the add.
type counts struct {
	stripes []countStripe
	mask    uint32
	// calls counts round trips; errors those that failed, but for
	// scriptErrors, those whose script failed (ErrScript).
	calls, errors, scriptErrors atomic.Uint64
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
func (c *counts) decided(admitted bool) {
	s := c.stripe()
	if admitted {
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

// stats returns what c has counted, as Stats reports it.
func (c *counts) stats() keylimit.Stats {
	st := keylimit.Stats{Decisions: true, Remote: true}
	for i := range c.stripes {
		s := &c.stripes[i]
		st.Admitted += s.admitted.Load()
		st.Refused += s.refused.Load()
		st.Fallbacks += s.fallbacks.Load()
		st.CacheHits += s.hits.Load()
	}
	st.Calls, st.Errors, st.ScriptErrors = c.calls.Load(), c.errors.Load(), c.scriptErrors.Load()
	return st
}
