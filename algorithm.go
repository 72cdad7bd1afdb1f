package keylimit

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// Algorithm is how an Adaptive moves a limit between a floor and a ceiling
// from the latency and the outcome of the calls it admitted: AIMD or
// Gradient. The zero Algorithm is none, and NewAdaptive refuses it.
type Algorithm struct {
	ctl            controller
	floor, ceiling int
}

// AIMD is additive increase, multiplicative decrease: after each window of
// samples (16 releases), the limit falls by a tenth if a call of the window
// was dropped (Permit.Drop) or the window's mean latency was above twice
// the lowest mean seen (see Gradient for how that ages), and otherwise
// grows by one if the window was busy (in flight reached half the limit);
// an idle limit stays where it is. It never leaves [floor, ceiling].
// NewAdaptive reports an invalid floor or ceiling.
func AIMD(floor, ceiling int) Algorithm {
	return Algorithm{ctl: aimd{add: 1, backoff: 0.9, tolerance: 2}, floor: floor, ceiling: ceiling}
}

// Gradient moves the limit by the ratio of the lowest latency seen to the
// latency now: after each window of samples (16 releases), the gradient is
// 1.5 × the baseline (the lowest window mean seen, which rises toward
// higher means by 1/128 of the gap a window, so that a lasting change of
// the service is learnt) over the window's mean, kept within [0.5, 1] and
// lowered by the share of calls dropped. The new limit is limit × gradient
// plus a queue allowance of √limit, smoothed (a fifth of the way there a
// window). A window in which in flight never reached half the limit, and
// nothing was dropped, leaves the limit as it was: it says nothing of more
// load. It never leaves [floor, ceiling]. NewAdaptive reports an invalid
// floor or ceiling.
func Gradient(floor, ceiling int) Algorithm {
	return Algorithm{ctl: gradient{tolerance: 1.5, smoothing: 0.2, least: 0.5}, floor: floor, ceiling: ceiling}
}

// check returns an error if a cannot make an Adaptive.
func (a Algorithm) check() error {
	switch {
	case a.ctl == nil:
		return fmt.Errorf("keylimit: an Adaptive needs an Algorithm (AIMD or Gradient)")
	case a.floor < 1:
		return fmt.Errorf("keylimit: adaptive floor %d is below 1", a.floor)
	case a.ceiling < a.floor:
		return fmt.Errorf("keylimit: adaptive ceiling %d is below its floor %d", a.ceiling, a.floor)
	case a.ceiling > MaxConcurrency:
		return fmt.Errorf("keylimit: adaptive ceiling %d is above MaxConcurrency (%d)", a.ceiling, MaxConcurrency)
	}
	return nil
}

// initial is the limit an Adaptive starts at: the geometric mean of floor
// and ceiling, between the two where an algorithm finds the right one soon
// from either side.
func (a Algorithm) initial() int64 {
	return min(max(int64(math.Sqrt(float64(a.floor)*float64(a.ceiling))), int64(a.floor)), int64(a.ceiling))
}

// controller is what an Algorithm does: the next limit after a window.
type controller interface {
	// next returns the limit after window w from e's; it may move e.base.
	next(e *estimate, w window) float64
}

// window is one window of samples, as a controller sees it.
type window struct {
	n      int64   // samples
	meanNs float64 // their mean latency, in ns
	drops  int64   // of them dropped (Permit.Drop)
	busy   bool    // in flight reached half the limit at a release
}

// estimate is what a control learns: its limit, unrounded, and the
// baseline latency.
type estimate struct {
	limit float64
	// base is the lowest window mean seen, in ns, rising toward later
	// higher means by 1/baseAge of the gap a window; 0 before any.
	base float64
}

// baseAge is how many windows a baseline takes to follow a higher mean
// most of the way (a lower one it takes at once).
const baseAge = 128

// learn moves e's baseline with window w.
func (e *estimate) learn(w window) {
	switch {
	case w.n == 0:
	case e.base == 0 || w.meanNs < e.base:
		e.base = w.meanNs
	default:
		e.base += (w.meanNs - e.base) / baseAge
	}
}

type aimd struct{ add, backoff, tolerance float64 }

func (a aimd) next(e *estimate, w window) float64 {
	slow := e.base > 0 && w.meanNs > a.tolerance*e.base
	e.learn(w)
	switch {
	case w.drops > 0 || slow:
		return e.limit * a.backoff
	case w.busy:
		return e.limit + a.add
	}
	return e.limit
}

type gradient struct{ tolerance, smoothing, least float64 }

func (g gradient) next(e *estimate, w window) float64 {
	base := e.base
	e.learn(w)
	if !w.busy && w.drops == 0 || w.n == 0 {
		return e.limit
	}
	grad := 1.0
	if base > 0 && w.meanNs > 0 {
		grad = min(max(g.tolerance*base/w.meanNs, g.least), 1)
	}
	if w.drops > 0 {
		grad = min(grad, max(1-float64(w.drops)/float64(w.n), g.least))
	}
	target := e.limit*grad + math.Sqrt(e.limit)
	return e.limit*(1-g.smoothing) + target*g.smoothing
}

// windowSamples is how many releases make a window.
const windowSamples = 16

// control is one limit an Adaptive adapts, a key's or the overall one, and
// the window of samples it gathers. Samples are added with atomic adds, and
// the release that fills a window folds it into the estimate under mu. A
// sample added while a window is folded may have its latency counted in
// one window and its count in the next: the mean errs by a sample or two,
// which the smoothing absorbs.
type control struct {
	// limit is the current limit, in whole slots within [floor, ceiling]:
	// written under mu by the release that folds a window, read by every
	// decision.
	limit atomic.Int64
	// meanNs is the last window's mean latency in ns (0 before any), for
	// the RetryAfter of a refusal.
	meanNs atomic.Int64
	// The window being gathered: samples, their latency in ns, drops, and
	// whether in flight reached half the limit at a release.
	n, sumNs, drops atomic.Int64
	busy            atomic.Bool
	mu              sync.Mutex // protects est; TryLocked by the release that fills a window
	est             estimate
}

// init sets the control's limit to limit.
func (c *control) init(limit int64) {
	c.limit.Store(limit)
	c.est.limit = float64(limit)
}

// sample adds a release of latency ns, dropped or not, that found inFlight
// slots held (itself included), and folds the window if it is full.
func (c *control) sample(a *adCore, ns int64, drop bool, inFlight int64) {
	if inFlight*2 >= c.limit.Load() && !c.busy.Load() {
		c.busy.Store(true)
	}
	c.sumNs.Add(ns)
	if drop {
		c.drops.Add(1)
	}
	if c.n.Add(1) >= windowSamples && c.mu.TryLock() {
		c.fold(a)
		c.mu.Unlock()
	}
}

// fold takes the window gathered and moves the limit by it. The caller
// holds mu.
func (c *control) fold(a *adCore) {
	if c.n.Load() < windowSamples {
		return // another fold took it
	}
	n := c.n.Swap(0)
	w := window{n: n, meanNs: float64(c.sumNs.Swap(0)) / float64(n), drops: c.drops.Swap(0), busy: c.busy.Swap(false)}
	c.est.limit = min(max(a.alg.next(&c.est, w), float64(a.floor)), float64(a.ceiling))
	c.limit.Store(int64(c.est.limit))
	c.meanNs.Store(int64(w.meanNs))
}
