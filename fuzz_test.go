package keylimit_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
)

// refBucket is a token bucket written the textbook way, to check the GCRA
// against: each key has a level of credit that refills with elapsed time, is
// capped at the capacity, and is spent by admissions. Credit is counted in ns
// of refill time (one token is Interval of credit, a full bucket Burst ×
// Interval), so the model is exact in integers. Like the limiter, it records
// only admissions: a refused call or a peek changes nothing.
type refBucket struct {
	interval, capacity int64
	burst              int
	keys               map[string]refKey
}

// refKey is the level of credit a key had at time at, just after its last
// admission.
type refKey struct{ level, at int64 }

func newRefBucket(l keylimit.Limit) *refBucket {
	iv := int64(l.Interval())
	return &refBucket{interval: iv, capacity: int64(l.BurstSize()) * iv, burst: l.BurstSize(), keys: map[string]refKey{}}
}

func (r *refBucket) level(key string, now int64) int64 {
	k, ok := r.keys[key]
	if !ok {
		k = refKey{level: r.capacity, at: 0} // full when the limiter was created
	}
	return min(r.capacity, k.level+(now-k.at))
}

func (r *refBucket) report(allowed bool, level, need int64) keylimit.Result {
	res := keylimit.Result{
		Allowed:    allowed,
		Limit:      r.burst,
		Remaining:  int(max(level, 0) / r.interval),
		ResetAfter: time.Duration(max(r.capacity-level, 0)),
	}
	if !allowed {
		res.RetryAfter = time.Duration(need - level)
	}
	return res
}

func (r *refBucket) take(key string, n int, now int64) keylimit.Result {
	level := r.level(key, now)
	switch {
	case n == 0:
		return r.report(true, level, 0)
	case n < 0 || n > r.burst:
		res := r.report(false, level, 0)
		res.RetryAfter = keylimit.InfDuration
		return res
	}
	need := int64(n) * r.interval
	if level < need {
		return r.report(false, level, need)
	}
	r.keys[key] = refKey{level: level - need, at: now}
	return r.report(true, level-need, 0)
}

func (r *refBucket) peek(key string, now int64) keylimit.Result {
	level := r.level(key, now)
	return r.report(level >= r.interval, level, r.interval)
}

var fuzzPeriods = []time.Duration{time.Second, 7 * time.Millisecond, time.Minute, 333 * time.Nanosecond, time.Hour}

// FuzzTokenBucket runs random sequences of clock moves (forward and back),
// Take, Peek and Reset on three keys, and checks that every Result equals
// the reference model's.
func FuzzTokenBucket(f *testing.F) {
	f.Add(uint8(5), uint8(0), uint8(0), []byte{3, 0, 3, 3, 0, 9, 0, 0, 40, 3, 0, 2, 4, 0, 0})
	f.Add(uint8(3), uint8(1), uint8(7), []byte{3, 1, 8, 2, 0, 90, 3, 1, 1, 5, 1, 0, 3, 1, 200})
	f.Add(uint8(1), uint8(3), uint8(2), []byte{1, 2, 3, 3, 2, 3, 0, 2, 255, 4, 2, 0})
	f.Fuzz(func(t *testing.T, events, period, burst uint8, ops []byte) {
		l := keylimit.Per(int(events%20)+1, fuzzPeriods[int(period)%len(fuzzPeriods)])
		if burst%12 != 0 {
			l = l.WithBurst(int(burst % 12))
		}
		if l.Validate() != nil {
			return
		}
		mock := newFastClock()
		lim, err := keylimit.NewTokenBucket[string](l, keylimit.WithClock(mock))
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		ref := newRefBucket(l)
		t0 := mock.Now()
		// A step of a seventh of the interval lands between token arrivals.
		unit := max(l.Interval()/7, 1)
		keys := []string{"a", "b", "c"}
		for i := 0; i+2 < len(ops); i += 3 {
			key, arg := keys[int(ops[i+1])%len(keys)], int(ops[i+2])
			now := int64(mock.Now().Sub(t0))
			var got, want keylimit.Result
			switch ops[i] % 6 {
			case 0:
				mock.Add(time.Duration(arg) * unit)
				continue
			case 1:
				mock.Add(time.Duration(arg) * l.Period)
				continue
			case 2:
				mock.Add(-time.Duration(arg) * unit) // the clock steps back
				continue
			case 3:
				n := arg%(ref.burst+3) - 1 // -1 .. burst+1
				got, want = lim.Take(key, n), ref.take(key, n, now)
			case 4:
				got, want = lim.Peek(key), ref.peek(key, now)
			case 5:
				lim.Reset(key)
				delete(ref.keys, key)
				continue
			}
			if got != want {
				t.Fatalf("op %d (%d on %q, arg %d) at %v with %v:\n got %+v\nwant %+v", i/3, ops[i]%6, key, arg, time.Duration(now), l, got, want)
			}
		}
	})
}

// windowFuzzPeriods adds a one-nanosecond window to fuzzPeriods: the
// tightest packing of a window index and counts in one word.
var windowFuzzPeriods = append([]time.Duration{time.Nanosecond}, fuzzPeriods...)

// refWindow is what the window fuzz targets need of a reference model. now
// is in ns since the limiter's creation.
type refWindow interface {
	take(key string, n int, now int64) keylimit.Result
	peek(key string, now int64) keylimit.Result
	refund(key string, n int)
	reset(key string)
}

// windowLimiter is what the window fuzz targets drive.
type windowLimiter interface {
	keylimit.Limiter[string]
	keylimit.Refunder[string]
	Close() error
}

// fuzzWindow runs random sequences of clock moves (forward and back), Take,
// Peek, Reset and Refund on three keys of lim, and checks that every Result
// equals ref's. The limiter holds at most 3 keys, and an op takes a fourth
// key and gives it back: at the cap that sweeps, and forgets the idle keys
// among the three, which must change no decision.
//
// A key is idle when it is indistinguishable from a new one at the sweep's
// time and after: a clock that later steps back before the sweep could tell
// (as for a TokenBucket, whose forgotten key comes back full). So the clock
// never steps back before the last sweep.
func fuzzWindow(t *testing.T, lim windowLimiter, ref refWindow, mock *fastClock, l keylimit.Limit, ops []byte) {
	defer lim.Close()
	t0 := mock.Now()
	unit := max(l.Period/13, 1) // steps land inside windows, not only on their edges
	keys := []string{"a", "b", "c"}
	swept := mock.Now()
	for i := 0; i+2 < len(ops); i += 3 {
		key, arg := keys[int(ops[i+1])%len(keys)], int(ops[i+2])
		now := int64(mock.Now().Sub(t0))
		var got, want keylimit.Result
		switch ops[i] % 8 {
		case 0:
			mock.Add(time.Duration(arg) * unit)
			continue
		case 1:
			mock.Add(time.Duration(arg%4) * l.Period)
			continue
		case 2:
			// The clock steps back, not before the last sweep.
			mock.Add(-min(time.Duration(arg)*unit, mock.Now().Sub(swept)))
			continue
		case 3:
			n := arg%(l.Events+3) - 1 // -1 .. Events+1
			got, want = lim.Take(key, n), ref.take(key, n, now)
		case 4:
			got, want = lim.Peek(key), ref.peek(key, now)
		case 5:
			lim.Reset(key)
			ref.reset(key)
			continue
		case 6:
			n := arg%(l.Events+1) + 1
			lim.Refund(key, n)
			ref.refund(key, n)
			continue
		case 7:
			lim.Take("probe", 1)
			lim.Reset("probe")
			swept = mock.Now()
			continue
		}
		if got != want {
			t.Fatalf("op %d (%d on %q, arg %d) at %v with %v:\n got %+v\nwant %+v", i/3, ops[i]%8, key, arg, time.Duration(now), l, got, want)
		}
	}
}

// fuzzWindowSetup builds the limit and clock of a window fuzz run: Events
// 1..20, a period from windowFuzzPeriods, and a creation time offset from a
// period boundary by a fuzzed amount, so windows align anywhere.
func fuzzWindowSetup(events, period, offset uint8) (keylimit.Limit, *fastClock) {
	l := keylimit.Per(int(events%20)+1, windowFuzzPeriods[int(period)%len(windowFuzzPeriods)])
	mock := newFastClock()
	mock.Add(time.Duration(offset) * 7_919_111)
	return l, mock
}

// windowOpts are the options of every window fuzz run: at most 3 keys,
// no background sweeps.
func windowOpts(mock *fastClock) []keylimit.Option {
	return []keylimit.Option{keylimit.WithClock(mock), keylimit.WithMaxKeys(3), keylimit.WithEvictionInterval(0)}
}

var windowFuzzSeeds = []struct {
	events, period, offset uint8
	ops                    []byte
}{
	{5, 1, 0, []byte{3, 0, 3, 3, 0, 9, 0, 0, 40, 3, 0, 2, 4, 0, 0, 7, 0, 0, 3, 0, 1}},
	{3, 2, 9, []byte{3, 1, 8, 2, 0, 90, 3, 1, 1, 6, 1, 2, 3, 1, 200, 1, 0, 1, 7, 0, 0, 4, 1, 0}},
	{1, 4, 200, []byte{1, 2, 3, 3, 2, 3, 0, 2, 255, 4, 2, 0, 2, 0, 30, 3, 2, 2}},
	{2, 0, 3, []byte{3, 0, 3, 0, 0, 1, 3, 0, 3, 2, 0, 1, 3, 0, 2, 7, 0, 0, 4, 0, 0}},
}

// FuzzFixedWindow checks FixedWindow against refFixed.
func FuzzFixedWindow(f *testing.F) {
	for _, s := range windowFuzzSeeds {
		f.Add(s.events, s.period, s.offset, s.ops)
	}
	f.Fuzz(func(t *testing.T, events, period, offset uint8, ops []byte) {
		l, mock := fuzzWindowSetup(events, period, offset)
		lim, err := keylimit.NewFixedWindow[string](l, windowOpts(mock)...)
		if err != nil {
			return // too many events for a nanosecond window
		}
		fuzzWindow(t, lim, newRefFixed(l, mock.Now()), mock, l, ops)
	})
}

// FuzzSlidingWindow checks SlidingWindow against refSliding.
func FuzzSlidingWindow(f *testing.F) {
	for _, s := range windowFuzzSeeds {
		f.Add(s.events, s.period, s.offset, s.ops)
	}
	f.Fuzz(func(t *testing.T, events, period, offset uint8, ops []byte) {
		l, mock := fuzzWindowSetup(events, period, offset)
		lim, err := keylimit.NewSlidingWindow[string](l, windowOpts(mock)...)
		if err != nil {
			t.Fatal(err)
		}
		fuzzWindow(t, lim, newRefSliding(l), mock, l, ops)
	})
}

// FuzzSlidingCounter checks SlidingCounter against refCounter.
func FuzzSlidingCounter(f *testing.F) {
	for _, s := range windowFuzzSeeds {
		f.Add(s.events, s.period, s.offset, s.ops)
	}
	f.Fuzz(func(t *testing.T, events, period, offset uint8, ops []byte) {
		l, mock := fuzzWindowSetup(events, period, offset)
		lim, err := keylimit.NewSlidingCounter[string](l, windowOpts(mock)...)
		if err != nil {
			return // too many events for a nanosecond window
		}
		fuzzWindow(t, lim, newRefCounter(l, mock.Now()), mock, l, ops)
	})
}

// refFixed is a fixed window written the plain way: each key has the
// absolute number of the window (Unix time / period, rounded down) it last
// admitted in and the count there. A key decides in now's window, or in its
// own if that is later (time does not go back inside a key).
type refFixed struct {
	period, start int64 // start: the limiter's creation in Unix ns
	events        int
	keys          map[string]refFixedKey
}

type refFixedKey struct{ window, count int64 }

func newRefFixed(l keylimit.Limit, created time.Time) *refFixed {
	return &refFixed{period: int64(l.Period), start: created.UnixNano(), events: l.Events, keys: map[string]refFixedKey{}}
}

// at returns the window key decides in at now and its count there.
func (r *refFixed) at(key string, now int64) refFixedKey {
	unix := r.start + now
	w := unix / r.period
	if unix%r.period < 0 {
		w-- // round down before the epoch
	}
	k, ok := r.keys[key]
	switch {
	case !ok || k.window < w:
		return refFixedKey{window: w}
	default:
		return k
	}
}

func (r *refFixed) report(allowed bool, k refFixedKey, now int64) keylimit.Result {
	left := time.Duration((k.window+1)*r.period - r.start - now)
	res := keylimit.Result{Allowed: allowed, Limit: r.events, Remaining: r.events - int(k.count)}
	if k.count > 0 {
		res.ResetAfter = left
	}
	if !allowed {
		res.RetryAfter = left
	}
	return res
}

func (r *refFixed) take(key string, n int, now int64) keylimit.Result {
	k := r.at(key, now)
	switch {
	case n == 0:
		return r.report(true, k, now)
	case n < 0 || n > r.events:
		res := r.report(false, k, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case int(k.count)+n > r.events:
		return r.report(false, k, now)
	}
	k.count += int64(n)
	r.keys[key] = k
	return r.report(true, k, now)
}

func (r *refFixed) peek(key string, now int64) keylimit.Result {
	k := r.at(key, now)
	return r.report(int(k.count) < r.events, k, now)
}

func (r *refFixed) refund(key string, n int) {
	if k, ok := r.keys[key]; ok {
		k.count = max(k.count-int64(n), 0)
		r.keys[key] = k
	}
}

func (r *refFixed) reset(key string) { delete(r.keys, key) }

// refSliding is a sliding log written the plain way: each key keeps the
// times of its last Events admissions, oldest first (older ones can never
// be in a window that holds the last Events, or fewer). At now, a key's
// time is now or its newest admission if later (time does not go back
// inside a key); the events in its window are those after that time −
// period. n events are admitted iff they fit, recorded at the key's time.
type refSliding struct {
	period int64
	events int
	keys   map[string][]int64
}

func newRefSliding(l keylimit.Limit) *refSliding {
	return &refSliding{period: int64(l.Period), events: l.Events, keys: map[string][]int64{}}
}

// at returns key's time at now.
func (r *refSliding) at(key string, now int64) int64 {
	log := r.keys[key]
	if len(log) > 0 {
		return max(now, log[len(log)-1])
	}
	return now
}

// count returns how many of key's events are in the window ending at t.
func (r *refSliding) count(key string, t int64) int {
	c := 0
	for _, e := range r.keys[key] {
		if e > t-r.period {
			c++
		}
	}
	return c
}

// fits reports whether n events of key fit at now.
func (r *refSliding) fits(key string, n int, now int64) bool {
	return r.count(key, r.at(key, now))+n <= r.events
}

func (r *refSliding) report(allowed bool, key string, n int, now int64) keylimit.Result {
	t := r.at(key, now)
	c := r.count(key, t)
	res := keylimit.Result{Allowed: allowed, Limit: r.events, Remaining: r.events - c}
	if log := r.keys[key]; c > 0 {
		res.ResetAfter = time.Duration(log[len(log)-1] + r.period - now)
	}
	if !allowed && n > 0 && n <= r.events {
		// The first moment n fit: now, or when an entry leaves the window.
		for _, e := range r.keys[key] {
			if leave := e + r.period; leave > now && r.fits(key, n, leave) {
				res.RetryAfter = time.Duration(leave - now)
				break
			}
		}
	}
	return res
}

func (r *refSliding) take(key string, n int, now int64) keylimit.Result {
	switch {
	case n == 0:
		return r.report(true, key, n, now)
	case n < 0 || n > r.events:
		res := r.report(false, key, n, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case !r.fits(key, n, now):
		return r.report(false, key, n, now)
	}
	t := r.at(key, now)
	log := r.keys[key]
	for range n {
		log = append(log, t)
	}
	r.keys[key] = log[max(len(log)-r.events, 0):]
	return r.report(true, key, n, now)
}

func (r *refSliding) peek(key string, now int64) keylimit.Result {
	return r.report(r.fits(key, 1, now), key, 1, now)
}

func (r *refSliding) refund(key string, n int) {
	log := r.keys[key]
	r.keys[key] = log[:len(log)-min(n, len(log))]
}

func (r *refSliding) reset(key string) { delete(r.keys, key) }

// refCounter is the sliding counter written the plain way, in rationals:
// each key has a count per absolute window (Unix time / period, rounded
// down) and the latest window it admitted in. At now, a key's time is now,
// or the start of its latest window if later (time does not go back inside
// a key); its estimate there is count(previous window) × the share of the
// previous window still inside the sliding one + count(current window). n
// events fit iff estimate + n <= Events. Waits are found by bisection over
// time, which works because the estimate only falls as time passes.
type refCounter struct {
	period, start int64
	events        int
	keys          map[string]*refCounterKey
}

type refCounterKey struct {
	latest int64
	counts map[int64]int64
}

func newRefCounter(l keylimit.Limit, created time.Time) *refCounter {
	return &refCounter{period: int64(l.Period), start: created.UnixNano(), events: l.Events, keys: map[string]*refCounterKey{}}
}

// window returns the absolute window of now and its start, in the
// limiter's time.
func (r *refCounter) window(now int64) (w, start int64) {
	unix := r.start + now
	w = unix / r.period
	if unix%r.period < 0 {
		w--
	}
	return w, w*r.period - r.start
}

// at returns key's window and the time into it at now.
func (r *refCounter) at(key string, now int64) (w, elapsed int64) {
	w, start := r.window(now)
	if k := r.keys[key]; k != nil && k.latest > w {
		return k.latest, 0
	}
	return w, now - start
}

// estimate returns key's estimate at now.
func (r *refCounter) estimate(key string, now int64) *big.Rat {
	w, elapsed := r.at(key, now)
	k := r.keys[key]
	if k == nil {
		return new(big.Rat)
	}
	est := big.NewRat(k.counts[w-1]*(r.period-elapsed), r.period)
	return est.Add(est, big.NewRat(k.counts[w], 1))
}

// fits reports whether n events of key fit at now.
func (r *refCounter) fits(key string, n int, now int64) bool {
	est := r.estimate(key, now)
	return est.Add(est, big.NewRat(int64(n), 1)).Cmp(big.NewRat(int64(r.events), 1)) <= 0
}

// first returns the earliest time from now on at which ok holds for key,
// which once true stays true; it holds at the latest 3 periods after key's
// time.
func (r *refCounter) first(key string, now int64, ok func(t int64) bool) int64 {
	lo, hi := now, now+3*r.period
	if k := r.keys[key]; k != nil {
		hi = max(hi, k.latest*r.period-r.start+3*r.period)
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (r *refCounter) report(allowed bool, key string, n int, now int64) keylimit.Result {
	res := keylimit.Result{Allowed: allowed, Limit: r.events}
	for m := r.events; m > 0; m-- {
		if r.fits(key, m, now) {
			res.Remaining = m
			break
		}
	}
	res.ResetAfter = time.Duration(r.first(key, now, func(t int64) bool { return r.estimate(key, t).Sign() == 0 }) - now)
	if !allowed && n > 0 && n <= r.events {
		res.RetryAfter = time.Duration(r.first(key, now, func(t int64) bool { return r.fits(key, n, t) }) - now)
	}
	return res
}

func (r *refCounter) take(key string, n int, now int64) keylimit.Result {
	switch {
	case n == 0:
		return r.report(true, key, n, now)
	case n < 0 || n > r.events:
		res := r.report(false, key, n, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case !r.fits(key, n, now):
		return r.report(false, key, n, now)
	}
	w, _ := r.at(key, now)
	k := r.keys[key]
	if k == nil {
		k = &refCounterKey{counts: map[int64]int64{}}
		r.keys[key] = k
	}
	k.latest = w
	k.counts[w] += int64(n)
	return r.report(true, key, n, now)
}

func (r *refCounter) peek(key string, now int64) keylimit.Result {
	return r.report(r.fits(key, 1, now), key, 1, now)
}

func (r *refCounter) refund(key string, n int) {
	k := r.keys[key]
	if k == nil {
		return
	}
	for _, w := range []int64{k.latest, k.latest - 1} {
		back := min(int64(n), k.counts[w])
		k.counts[w] -= back
		n -= int(back)
	}
}

func (r *refCounter) reset(key string) { delete(r.keys, key) }
