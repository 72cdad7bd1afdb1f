package adaptive

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/keylimit/keylimit"
)

// Algorithm is how a Limiter moves a limit between a floor and a ceiling
// from the latency and the outcome of the calls it admitted: AIMD or
// Gradient. The zero Algorithm is none, and New refuses it.
type Algorithm struct {
	ctl            controller
	floor, ceiling int
}

// AIMD is additive increase, multiplicative decrease. A limit starts at
// the floor, in slow start: it doubles after each busy window of samples
// (16 releases, in flight reaching half the limit at one of them) until a
// window's mean latency is above 1.5 × the baseline, which takes it back
// to where it was before the last doubling (the last limit that did not
// queue), or a call is dropped (Permit.Drop). From then on, after each
// window: if the mean was above 1.5 × the baseline, it falls by the ratio
// of 1.5 × the baseline to the mean, by a tenth at least and by 30% at
// most (a queue far above the tolerance, as when the service loses
// capacity, is drained in a few windows, not ten; a stall of the machine
// does not halve it); else it falls by a
// tenth if a call was dropped, grows by one if the window was busy, and
// otherwise (the limit not in use) moves half the way down to twice the
// most in flight in the window. The tolerance of 1.5 keeps the queue it
// allows to half a call's service time, so that the latency of admitted
// calls stays within a few times the unloaded one.
// The baseline, and which limits latency may cut, are as Gradient's. The
// limit never leaves [floor, ceiling]; New reports an invalid
// floor or ceiling.
func AIMD(floor, ceiling int) Algorithm {
	return Algorithm{ctl: aimd{add: 1, backoff: 0.9, tolerance: 1.5}, floor: floor, ceiling: ceiling}
}

// Gradient moves the limit by the ratio of the service's latency to the
// latency now. A limit starts at the floor, in slow start as AIMD's, until
// a window's mean latency is above 1.2 × the baseline (back to the limit
// before the last doubling) or a call is dropped. From then on, after each
// window of samples (16 releases), the gradient is 1.2 × the baseline over
// the window's mean, within [0.5, 1], lowered by the share of calls
// dropped, and the limit moves a fifth of the way to limit × gradient +
// √limit / 2 (the allowance of a queue: at a limit of 16 the limit stays
// where the mean is about 1.4 × the baseline); 70% of the way, when
// latency above the tolerance puts that below the limit, so that a queue
// is drained faster than it is built. A window that was not busy (in flight never reached half the
// limit) and dropped nothing says nothing of more load: the limit moves
// half the way down to twice the most in flight in it, so a limit not in
// use (one slow start took too high, one another limit keeps from being
// reached) comes down to what is used.
//
// The baseline is the lowest window mean seen. It rises only while the
// limit is as low as latency takes it (the floor), an eighth of the way to
// the mean a window: latency that a limit so low does not bring down is
// the service's own, not a queue's.
//
// A key's own limit is cut by latency only in a window in which the key
// held more than half the overall limit at a release (so one key at most,
// the one that makes most of the queue): latency that a heavy key's queue
// causes does not shrink the limits of the light keys beside it, and
// their limits follow their own use (the rules above). Drops cut any
// key's limit. The overall limit learns from every call.
// The limit never leaves [floor, ceiling]; New reports an invalid
// floor or ceiling.
func Gradient(floor, ceiling int) Algorithm {
	return Algorithm{ctl: gradient{tolerance: 1.2, smoothing: 0.2, down: 0.7, least: 0.5, allowance: 0.5}, floor: floor, ceiling: ceiling}
}

// check returns an error if a cannot make a Limiter.
func (a Algorithm) check() error {
	switch {
	case a.ctl == nil:
		return fmt.Errorf("adaptive: a Limiter needs an Algorithm (AIMD or Gradient)")
	case a.floor < 1:
		return fmt.Errorf("adaptive: floor %d is below 1", a.floor)
	case a.ceiling < a.floor:
		return fmt.Errorf("adaptive: ceiling %d is below its floor %d", a.ceiling, a.floor)
	case a.ceiling > keylimit.MaxConcurrency:
		return fmt.Errorf("adaptive: ceiling %d is above MaxConcurrency (%d)", a.ceiling, keylimit.MaxConcurrency)
	}
	return nil
}

// controller is what an Algorithm does: the next limit after a window.
type controller interface {
	// next returns the limit after window w from e's; it may move e.base.
	next(e *estimate, w window) float64
	// lowest is the least limit it lowers a limit of floor to for latency:
	// while there, latency is the service's own (see estimate.base).
	lowest(floor float64) float64
}

// window is one window of samples, as a controller sees it.
type window struct {
	n      int64   // samples
	meanNs float64 // their mean latency, in ns
	drops  int64   // of them dropped (Permit.Drop)
	busy   bool    // in flight reached half the limit at a release
	peak   int64   // the most in flight at a release
	// latency says the window's latency may cut the limit: always the
	// overall one's; a key's only if it held more than half the overall
	// limit at a release (see Gradient).
	latency bool
	// atFloor says the limit was as low as the algorithm takes it for
	// latency (controller.lowest) through the window.
	atFloor bool
}

// estimate is what a control learns: its limit, unrounded, and the
// baseline latency.
type estimate struct {
	limit float64
	// started says slow start is over (see slowStart).
	started bool
	// base is the lowest window mean seen, in ns (0 before any). It rises
	// only while the limit is as low as the algorithm takes it for latency
	// (controller.lowest), toward the means seen there, by
	// 1/baseAge of the gap a window: latency that a limit at its floor
	// does not bring down is the service's own, not a queue's. Were it to
	// follow higher means at any limit, a queue that lasts would become
	// the baseline, and the limit would grow to the ceiling.
	base float64
}

// baseAge is how many windows at the floor a baseline takes to follow a
// higher mean most of the way (a lower one it takes at once).
const baseAge = 8

// slowStart is the next limit of a control in slow start, and true; or
// false once slow start is over. A limit starts at the floor, where the
// first windows measure the service's latency with no queue, and doubles
// after each busy window until a window's mean is above tolerance × the
// baseline, or a call is dropped: from that window on, the algorithm
// moves it.
func (e *estimate) slowStart(w window, tolerance float64) (float64, bool) {
	if e.started {
		return 0, false
	}
	if w.drops > 0 || w.latency && e.base > 0 && w.meanNs > tolerance*e.base {
		e.started = true
		if w.drops == 0 && e.limit >= 2 {
			return e.limit / 2, true // the limit before the last doubling, which did not queue
		}
		return 0, false
	}
	e.learn(w)
	if w.busy {
		return e.limit * 2, true
	}
	return e.unused(w), true
}

// unused is the next limit after a window that was not busy and dropped
// nothing: half the way down to twice the most in flight in it (the limit
// is not in use, and a limit far above what is used means nothing, and
// lets a burst through that it should not). A window with no samples
// leaves it.
func (e *estimate) unused(w window) float64 {
	if w.n == 0 {
		return e.limit
	}
	return min(e.limit, (e.limit+float64(2*w.peak))/2)
}

// learn moves e's baseline with window w.
func (e *estimate) learn(w window) {
	switch {
	case w.n == 0:
	case e.base == 0 || w.meanNs < e.base:
		e.base = w.meanNs
	case w.atFloor:
		e.base += (w.meanNs - e.base) / baseAge
	}
}

type aimd struct{ add, backoff, tolerance float64 }

func (aimd) lowest(floor float64) float64 { return floor }

func (a aimd) next(e *estimate, w window) float64 {
	if l, ok := e.slowStart(w, a.tolerance); ok {
		return l
	}
	slow := w.latency && e.base > 0 && w.meanNs > a.tolerance*e.base
	e.learn(w)
	switch {
	case slow:
		// the further above the tolerance, the deeper the cut: at least a
		// tenth, at most 30%
		return e.limit * min(a.backoff, max(a.tolerance*e.base/w.meanNs, 0.7))
	case w.drops > 0:
		return e.limit * a.backoff
	case w.busy:
		return e.limit + a.add
	}
	return e.unused(w)
}

type gradient struct{ tolerance, smoothing, down, least, allowance float64 }

// lowest is the limit where limit × least + allowance × √limit stays: 1
// for a least gradient of 0.5 and an allowance of 0.5; the floor if higher.
func (g gradient) lowest(floor float64) float64 {
	r := g.allowance / (1 - g.least)
	return max(floor, r*r)
}

func (g gradient) next(e *estimate, w window) float64 {
	if l, ok := e.slowStart(w, g.tolerance); ok {
		return l
	}
	base := e.base
	e.learn(w)
	if w.n == 0 {
		return e.limit
	}
	if !w.busy && w.drops == 0 {
		return e.unused(w)
	}
	grad := 1.0
	if w.latency && base > 0 && w.meanNs > 0 {
		grad = min(max(g.tolerance*base/w.meanNs, g.least), 1)
	}
	if w.drops > 0 {
		grad = min(grad, max(1-float64(w.drops)/float64(w.n), g.least))
	}
	target := e.limit*grad + g.allowance*math.Sqrt(e.limit)
	if target < e.limit && grad < 1 {
		return e.limit*(1-g.down) + target*g.down // a queue above the tolerance: down faster
	}
	return e.limit*(1-g.smoothing) + target*g.smoothing
}

// windowSamples is how many releases make a window.
const windowSamples = 16

// control is one limit a Limiter adapts, a key's or the overall one, and
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
	// the RetryAfter of a refusal; baseNs and started are est's base and
	// started, for a new key's control to begin from.
	meanNs, baseNs atomic.Int64
	started        atomic.Bool
	pressed        atomic.Bool // see refused
	// The window being gathered: samples, their latency in ns, drops, and
	// the most in flight at a release (busy if at least half the limit).
	n, sumNs, drops, peak atomic.Int64
	// A key's, not the overall one's: refused is the requests refused in
	// the window being gathered; lastPeak the most in flight at a release
	// in the last window folded; pressed says the key refused at least as
	// many requests as it released in it: it asks for more than it gets.
	refused, lastPeak atomic.Int64
	mu                sync.Mutex // protects est; TryLocked by the release that fills a window
	est               estimate
}

// init starts the control at limit, with the baseline and the slow start
// of from (nil: none yet).
func (c *control) init(limit int64, from *control) {
	c.limit.Store(limit)
	c.est.limit = float64(limit)
	if from != nil {
		c.est.base, c.est.started = float64(from.baseNs.Load()), from.started.Load()
		c.baseNs.Store(int64(c.est.base))
		c.started.Store(c.est.started)
	}
}

// sample adds a release of latency ns, dropped or not, that found inFlight
// slots held (itself included), and folds the window if it is full.
func (c *control) sample(a *adCore, ns int64, drop bool, inFlight int64) {
	for p := c.peak.Load(); inFlight > p && !c.peak.CompareAndSwap(p, inFlight); p = c.peak.Load() {
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
	peak := c.peak.Swap(0)
	w := window{n: n, meanNs: float64(c.sumNs.Swap(0)) / float64(n), drops: c.drops.Swap(0),
		busy: 2*peak >= c.limit.Load(), peak: peak, latency: c == &a.all || 2*peak > a.all.limit.Load(),
		atFloor: c.est.limit < a.alg.lowest(float64(a.floor))+1}
	c.est.limit = min(max(a.alg.next(&c.est, w), float64(a.floor)), float64(a.ceiling))
	c.limit.Store(int64(c.est.limit))
	c.meanNs.Store(int64(w.meanNs))
	c.baseNs.Store(int64(c.est.base))
	c.started.Store(c.est.started)
	c.lastPeak.Store(peak)
	c.pressed.Store(c.refused.Swap(0) >= n)
}
