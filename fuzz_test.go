package keylimit_test

import (
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
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
	iv := int64(l.WithBurst(1).FillTime())
	return &refBucket{interval: iv, capacity: int64(l.BurstSize()) * iv, burst: l.BurstSize(), keys: map[string]refKey{}}
}

func (r *refBucket) level(key string, now int64) int64 {
	k, ok := r.keys[key]
	if !ok {
		return r.capacity // a key never seen is full at any time, before the creation too
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
	if res.Remaining < r.burst {
		res.RefillAfter = time.Duration(int64(res.Remaining+1)*r.interval - level)
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
		require.NoError(t, err)
		defer lim.Close()
		ref := newRefBucket(l)
		t0 := mock.Now()
		// A step of a seventh of the interval lands between token arrivals.
		unit := max(l.WithBurst(1).FillTime()/7, 1)
		keys := []string{"a", "b", "c"}
		var latest int64 // the limiter's time never goes back: the latest it read
		for i := 0; i+2 < len(ops); i += 3 {
			key, arg := keys[int(ops[i+1])%len(keys)], int(ops[i+2])
			now := max(int64(mock.Now().Sub(t0)), latest)
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
			latest = now
			if got != want { // a cheap compare first: require on every op would slow the fuzzer
				require.Equal(t, want, got, "op %d (%d on %q, arg %d) at %v with %v", i/3, ops[i]%6, key, arg, time.Duration(now), l)
			}
		}
	})
}

// windowFuzzPeriods adds a one-nanosecond window to fuzzPeriods: the
// tightest packing of a window index and counts in one word.
var windowFuzzPeriods = append([]time.Duration{time.Nanosecond}, fuzzPeriods...)

// refWindow is what the window fuzz targets need of a reference model. now
// is in ns since the limiter's creation.
//
// setLimit changes the limit. As in the limiters, a key moves to it on its
// next take or peek, at that call's time: a key idle under its old limit
// starts afresh, another carries its state over by the type's rules.
// (Refunds are checked by FuzzRefundsNeverOverAdmit, against the bound
// every type keeps, not against a model of each type's refund.)
type refWindow interface {
	take(key string, n int, now int64) keylimit.Result
	peek(key string, now int64) keylimit.Result
	reset(key string)
	setLimit(l keylimit.Limit)
}

// windowLimiter is what the window fuzz targets drive.
type windowLimiter interface {
	keylimit.Limiter[string]
	keylimit.Refunder[string]
	SetLimit(keylimit.Limit) error
	Close() error
}

// fuzzWindow runs random sequences of clock moves (forward and back), Take,
// Peek, AllowN, Reset and SetLimit on three keys of lim, and checks that
// every Result equals ref's. An op byte of 248 or more changes the limit
// (rare in random input, so that the other ops stay dense, and absent from
// the corpus committed before SetLimit, which keeps its meaning). The
// limiter holds at most 3 keys, and an op takes a fourth key and gives it
// back: at the cap that sweeps, and forgets the idle keys among the three,
// which must change no decision, even when the clock later steps back
// before the sweep (the limiter's time never goes back: the model decides
// at the latest time the limiter read).
func fuzzWindow(t *testing.T, lim windowLimiter, ref refWindow, mock *fastClock, l keylimit.Limit, ops []byte) {
	defer lim.Close()
	t0 := mock.Now()
	unit := max(l.Period/13, 1) // steps land inside windows, not only on their edges
	keys := []string{"a", "b", "c"}
	var latest int64 // the limiter's time never goes back: the latest it read
	for i := 0; i+2 < len(ops); i += 3 {
		key, arg := keys[int(ops[i+1])%len(keys)], int(ops[i+2])
		now := max(int64(mock.Now().Sub(t0)), latest)
		if ops[i] >= 248 {
			// Events 1..20 and a Period of fuzzPeriods: no nanosecond
			// window, whose few count bits could not hold every count.
			nl := keylimit.Per(arg%20+1, fuzzPeriods[int(ops[i+1])%len(fuzzPeriods)])
			require.NoError(t, lim.SetLimit(nl), "op %d: SetLimit(%v)", i/3, nl)
			ref.setLimit(nl)
			continue
		}
		var got, want keylimit.Result
		switch ops[i] % 8 {
		case 0:
			mock.Add(time.Duration(arg) * unit)
			continue
		case 1:
			mock.Add(time.Duration(arg%4) * l.Period)
			continue
		case 2:
			mock.Add(-time.Duration(arg) * unit) // the clock steps back
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
			// A request that can never pass may be refused without a look
			// at the clock: a Peek reads it, so that the limiter's latest
			// time is the model's.
			lim.Peek("clock")
			n := arg%(l.Events+1) + 1
			require.Equal(t, ref.take(key, n, now).Allowed, lim.AllowN(key, n), "op %d: AllowN(%q, %d) at %v", i/3, key, n, time.Duration(now))
		case 7:
			lim.Take("probe", 1) // at the cap: a sweep, which must change no decision
			lim.Reset("probe")
		}
		latest = now
		if ops[i]%8 >= 6 {
			continue
		}
		if got != want { // a cheap compare first: require on every op would slow the fuzzer
			require.Equal(t, want, got, "op %d (%d on %q, arg %d) at %v with %v", i/3, ops[i]%8, key, arg, time.Duration(now), l)
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
	// Changes of limit (op bytes from 248): raised, lowered, new Periods,
	// with AllowN, sweeps and the clock stepping back between them.
	{5, 1, 0, []byte{3, 0, 5, 250, 2, 9, 3, 0, 3, 4, 0, 0, 0, 0, 40, 250, 0, 2, 4, 0, 0, 3, 0, 2, 6, 0, 1, 250, 1, 19, 4, 0, 0, 2, 0, 5, 4, 0, 0}},
	{9, 2, 17, []byte{3, 1, 9, 3, 2, 4, 0, 0, 6, 252, 3, 1, 4, 1, 0, 3, 1, 1, 6, 1, 3, 253, 4, 12, 4, 1, 0, 7, 0, 0, 0, 0, 200, 4, 2, 0, 255, 0, 9, 3, 2, 9}},
	{19, 3, 99, []byte{3, 0, 20, 0, 0, 3, 3, 0, 20, 249, 1, 4, 4, 0, 0, 2, 0, 2, 4, 0, 0, 249, 0, 19, 3, 0, 7, 6, 0, 5, 4, 0, 0, 1, 0, 1, 4, 0, 0}},
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
		require.NoError(t, err)
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
// absolute number of the window (Unix time / its period, rounded down) it
// last admitted in, the count there, and the limit it is under. A key
// decides in now's window, or in its own if that is later (time does not go
// back inside a key).
type refFixed struct {
	start int64 // the limiter's creation in Unix ns
	limit keylimit.Limit
	gen   int // how many times the limit changed
	keys  map[string]refFixedKey
}

type refFixedKey struct {
	window, count int64
	limit         keylimit.Limit
	gen           int
}

func newRefFixed(l keylimit.Limit, created time.Time) *refFixed {
	return &refFixed{start: created.UnixNano(), limit: l, keys: map[string]refFixedKey{}}
}

// absWindow returns the absolute window of Unix time unix for period p.
func absWindow(unix int64, p time.Duration) int64 {
	w := unix / int64(p)
	if unix%int64(p) < 0 {
		w-- // round down before the epoch
	}
	return w
}

func (r *refFixed) setLimit(l keylimit.Limit) { r.limit, r.gen = l, r.gen+1 }

// move moves key to the current limit at now, if it is under an older one:
// idle (its window over, or nothing counted and its window begun), it is
// forgotten; else it goes to the new window that holds its time, max(now,
// its window's start), with its count.
func (r *refFixed) move(key string, now int64) {
	k, ok := r.keys[key]
	if !ok || k.gen == r.gen {
		return
	}
	p, unix := int64(k.limit.Period), r.start+now
	if k.count > 0 && (k.window+1)*p <= unix || k.count == 0 && k.window*p <= unix {
		delete(r.keys, key)
		return
	}
	r.keys[key] = refFixedKey{window: absWindow(max(unix, k.window*p), r.limit.Period), count: k.count, limit: r.limit, gen: r.gen}
}

// at returns the window key decides in at now and its count there.
func (r *refFixed) at(key string, now int64) refFixedKey {
	w := absWindow(r.start+now, r.limit.Period)
	k, ok := r.keys[key]
	switch {
	case !ok || k.window < w:
		return refFixedKey{window: w, limit: r.limit, gen: r.gen}
	default:
		return k
	}
}

func (r *refFixed) report(allowed bool, k refFixedKey, now int64) keylimit.Result {
	p, events := int64(r.limit.Period), r.limit.Events
	left := time.Duration((k.window+1)*p - r.start - now)
	res := keylimit.Result{Allowed: allowed, Limit: events, Remaining: max(events-int(k.count), 0)}
	if k.count > 0 {
		res.ResetAfter = left
	}
	if res.Remaining < events {
		res.RefillAfter = left
	}
	if !allowed {
		res.RetryAfter = left
	}
	return res
}

func (r *refFixed) take(key string, n int, now int64) keylimit.Result {
	r.move(key, now)
	k := r.at(key, now)
	switch {
	case n == 0:
		return r.report(true, k, now)
	case n < 0 || n > r.limit.Events:
		res := r.report(false, k, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case int(k.count)+n > r.limit.Events:
		return r.report(false, k, now)
	}
	k.count += int64(n)
	r.keys[key] = k
	return r.report(true, k, now)
}

func (r *refFixed) peek(key string, now int64) keylimit.Result {
	r.move(key, now)
	k := r.at(key, now)
	return r.report(int(k.count) < r.limit.Events, k, now)
}

func (r *refFixed) reset(key string) { delete(r.keys, key) }

// refSliding is a sliding log written the plain way: each key keeps the
// times of its last Events admissions, oldest first (older ones can never
// be in a window that holds the last Events, or fewer). At now, a key's
// time is now or its newest admission if later (time does not go back
// inside a key); the events in its window are those after that time −
// period. n events are admitted iff they fit, recorded at the key's time.
//
// A key moved to a smaller Events keeps its newest times, and counts the
// others as phantoms, which come back at its oldest time if it grows
// again; an admission forgets them (it overwrites the oldest times, which
// had left the window, and the phantoms are older).
type refSliding struct {
	limit keylimit.Limit
	gen   int
	keys  map[string]*refSlidingKey
}

type refSlidingKey struct {
	log      []int64
	phantoms int
	limit    keylimit.Limit
	gen      int
}

func newRefSliding(l keylimit.Limit) *refSliding {
	return &refSliding{limit: l, keys: map[string]*refSlidingKey{}}
}

func (r *refSliding) setLimit(l keylimit.Limit) { r.limit, r.gen = l, r.gen+1 }

// move moves key to the current limit, if it is under an older one. Of
// its times it keeps those in its old window at its time, and its
// phantoms if that is all of them; of those, the newest that the new
// Events has room for, counting the rest as phantoms.
func (r *refSliding) move(key string, now int64) {
	k := r.keys[key]
	if k == nil || k.gen == r.gen {
		return
	}
	var in []int64
	for _, e := range k.log {
		if e > r.at(key, now)-int64(k.limit.Period) {
			in = append(in, e)
		}
	}
	phantoms := k.phantoms
	if len(in) < len(k.log) {
		phantoms = 0
	}
	var all []int64
	if len(in) > 0 {
		all = append(slices.Repeat([]int64{in[0]}, phantoms), in...)
	}
	keep := min(len(all), r.limit.Events)
	r.keys[key] = &refSlidingKey{log: all[len(all)-keep:], phantoms: len(all) - keep, limit: r.limit, gen: r.gen}
}

// at returns key's time at now.
func (r *refSliding) at(key string, now int64) int64 {
	if k := r.keys[key]; k != nil && len(k.log) > 0 {
		return max(now, k.log[len(k.log)-1])
	}
	return now
}

// count returns how many of key's events are in the window ending at t.
func (r *refSliding) count(key string, t int64) int {
	c := 0
	if k := r.keys[key]; k != nil {
		for _, e := range k.log {
			if e > t-int64(r.limit.Period) {
				c++
			}
		}
	}
	return c
}

// fits reports whether n events of key fit at now.
func (r *refSliding) fits(key string, n int, now int64) bool {
	return r.count(key, r.at(key, now))+n <= r.limit.Events
}

func (r *refSliding) report(allowed bool, key string, n int, now int64) keylimit.Result {
	t := r.at(key, now)
	c := r.count(key, t)
	p, events := int64(r.limit.Period), r.limit.Events
	res := keylimit.Result{Allowed: allowed, Limit: events, Remaining: events - c}
	if c > 0 {
		log := r.keys[key].log
		res.ResetAfter = time.Duration(log[len(log)-1] + p - now)
	}
	// The first moment m fit: when an entry leaves the window.
	fitsAfter := func(m int) time.Duration {
		for _, e := range r.keys[key].log {
			if leave := e + p; leave > now && r.fits(key, m, leave) {
				return time.Duration(leave - now)
			}
		}
		return 0
	}
	if res.Remaining < events {
		res.RefillAfter = fitsAfter(res.Remaining + 1)
	}
	if !allowed && n > 0 && n <= events {
		res.RetryAfter = fitsAfter(n)
	}
	return res
}

func (r *refSliding) take(key string, n int, now int64) keylimit.Result {
	r.move(key, now)
	switch {
	case n == 0:
		return r.report(true, key, n, now)
	case n < 0 || n > r.limit.Events:
		res := r.report(false, key, n, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case !r.fits(key, n, now):
		return r.report(false, key, n, now)
	}
	t := r.at(key, now)
	k := r.keys[key]
	if k == nil {
		k = &refSlidingKey{limit: r.limit, gen: r.gen}
		r.keys[key] = k
	}
	for range n {
		k.log = append(k.log, t)
	}
	k.log = k.log[max(len(k.log)-r.limit.Events, 0):]
	k.phantoms = 0
	return r.report(true, key, n, now)
}

func (r *refSliding) peek(key string, now int64) keylimit.Result {
	r.move(key, now)
	return r.report(r.fits(key, 1, now), key, 1, now)
}

func (r *refSliding) reset(key string) { delete(r.keys, key) }

// refCounter is the sliding counter written the plain way, in rationals:
// each key has a count per absolute window (Unix time / its period, rounded
// down), the latest window it admitted in and the limit it is under. At
// now, a key's time is now, or the start of its latest window if later
// (time does not go back inside a key); its estimate there is
// count(previous window) × the share of the previous window still inside
// the sliding one + count(current window). n events fit iff estimate + n <=
// Events. Waits are found by bisection over time, which works because the
// estimate only falls as time passes.
type refCounter struct {
	start int64
	limit keylimit.Limit
	gen   int
	keys  map[string]*refCounterKey
}

type refCounterKey struct {
	latest int64
	counts map[int64]int64
	limit  keylimit.Limit
	gen    int
}

func newRefCounter(l keylimit.Limit, created time.Time) *refCounter {
	return &refCounter{start: created.UnixNano(), limit: l, keys: map[string]*refCounterKey{}}
}

func (r *refCounter) setLimit(l keylimit.Limit) { r.limit, r.gen = l, r.gen+1 }

// move moves key to the current limit at now, if it is under an older one:
// idle (its estimate nothing for good), it is forgotten; else it goes to
// the new window that holds its time, with the count of the window it
// decides in, and the count of the window before if that one ended after
// the new previous window began.
func (r *refCounter) move(key string, now int64) {
	k := r.keys[key]
	if k == nil || k.gen == r.gen {
		return
	}
	p, unix := int64(k.limit.Period), r.start+now
	cur, previous := k.counts[k.latest], k.counts[k.latest-1]
	if cur > 0 && (k.latest+2)*p <= unix || cur == 0 && previous > 0 && (k.latest+1)*p <= unix || cur == 0 && previous == 0 && k.latest*p <= unix {
		delete(r.keys, key)
		return
	}
	w := max(k.latest, absWindow(unix, k.limit.Period)) // the window it decides in
	np := int64(r.limit.Period)
	nw := absWindow(max(unix, w*p), r.limit.Period)
	moved := &refCounterKey{latest: nw, counts: map[int64]int64{nw: k.counts[w]}, limit: r.limit, gen: r.gen}
	if w*p > (nw-1)*np {
		moved.counts[nw-1] = k.counts[w-1]
	}
	r.keys[key] = moved
}

// window returns the absolute window of now and its start, in the
// limiter's time.
func (r *refCounter) window(now int64) (w, start int64) {
	w = absWindow(r.start+now, r.limit.Period)
	return w, w*int64(r.limit.Period) - r.start
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
	p := int64(r.limit.Period)
	est := big.NewRat(k.counts[w-1]*(p-elapsed), p)
	return est.Add(est, big.NewRat(k.counts[w], 1))
}

// fits reports whether n events of key fit at now.
func (r *refCounter) fits(key string, n int, now int64) bool {
	est := r.estimate(key, now)
	return est.Add(est, big.NewRat(int64(n), 1)).Cmp(big.NewRat(int64(r.limit.Events), 1)) <= 0
}

// first returns the earliest time from now on at which ok holds for key,
// which once true stays true; it holds at the latest 3 periods after key's
// time.
func (r *refCounter) first(key string, now int64, ok func(t int64) bool) int64 {
	p := int64(r.limit.Period)
	lo, hi := now, now+3*p
	if k := r.keys[key]; k != nil {
		hi = max(hi, k.latest*p-r.start+3*p)
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
	events := r.limit.Events
	res := keylimit.Result{Allowed: allowed, Limit: events}
	for m := events; m > 0; m-- {
		if r.fits(key, m, now) {
			res.Remaining = m
			break
		}
	}
	res.ResetAfter = time.Duration(r.first(key, now, func(t int64) bool { return r.estimate(key, t).Sign() == 0 }) - now)
	if more := res.Remaining + 1; more <= events {
		res.RefillAfter = time.Duration(r.first(key, now, func(t int64) bool { return r.fits(key, more, t) }) - now)
	}
	if !allowed && n > 0 && n <= events {
		res.RetryAfter = time.Duration(r.first(key, now, func(t int64) bool { return r.fits(key, n, t) }) - now)
	}
	return res
}

func (r *refCounter) take(key string, n int, now int64) keylimit.Result {
	r.move(key, now)
	switch {
	case n == 0:
		return r.report(true, key, n, now)
	case n < 0 || n > r.limit.Events:
		res := r.report(false, key, n, now)
		res.RetryAfter = keylimit.InfDuration
		return res
	case !r.fits(key, n, now):
		return r.report(false, key, n, now)
	}
	w, _ := r.at(key, now)
	k := r.keys[key]
	if k == nil {
		k = &refCounterKey{counts: map[int64]int64{}, limit: r.limit, gen: r.gen}
		r.keys[key] = k
	}
	k.latest = w
	k.counts[w] += int64(n)
	return r.report(true, key, n, now)
}

func (r *refCounter) peek(key string, now int64) keylimit.Result {
	r.move(key, now)
	return r.report(r.fits(key, 1, now), key, 1, now)
}

func (r *refCounter) reset(key string) { delete(r.keys, key) }

// FuzzRefundsNeverOverAdmit checks the guarantee exact refunds exist for:
// however late a refund comes, the admissions that stand (those not
// refunded) never exceed the limit. Random sequences of Admit, AllowN,
// Refund of any earlier admission (the latest, or one long ago), and clock
// moves run on one key of each type; then every interval is checked against
// the type's bound, counting only the admissions that stand.
func FuzzRefundsNeverOverAdmit(f *testing.F) {
	// The attack: admitted, the window rolls over, another admitted, then
	// the first refunded; a third must be refused.
	f.Add(uint8(0), uint8(1), uint8(1), []byte{0, 1, 0, 2, 10, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0})
	f.Add(uint8(1), uint8(3), uint8(2), []byte{0, 3, 0, 1, 2, 0, 0, 1, 0, 2, 5, 0, 1, 1, 0, 0, 3, 0})
	f.Add(uint8(2), uint8(4), uint8(3), []byte{0, 4, 0, 2, 3, 0, 0, 2, 0, 1, 0, 0, 2, 4, 0, 0, 4, 0})
	f.Add(uint8(3), uint8(5), uint8(0), []byte{0, 5, 0, 2, 13, 0, 0, 3, 0, 1, 1, 0, 3, 0, 0, 0, 5, 0})
	f.Fuzz(func(t *testing.T, typ, events, period uint8, ops []byte) {
		k := kinds[int(typ)%len(kinds)]
		l := keylimit.Per(int(events%10)+1, windowFuzzPeriods[int(period)%len(windowFuzzPeriods)])
		clk := newFastClock()
		lim, err := k.new(l, keylimit.WithClock(clk), keylimit.WithEvictionInterval(0))
		if err != nil {
			return // a limit the type does not take (too many events per ns)
		}
		defer lim.Close()

		type admission struct {
			at       int64 // Unix ns
			n        int
			adm      keylimit.Admission
			refunded bool
		}
		var adms []admission
		unit := max(l.Period/7, 1)
		for i := 0; i+2 < len(ops) && len(adms) < 200; i += 3 {
			arg := int(ops[i+1])
			switch ops[i] % 4 {
			case 0:
				n := arg%l.Events + 1
				if r, a := lim.Admit("k", n); r.Allowed {
					adms = append(adms, admission{at: clk.ns.Load(), n: n, adm: a})
				}
			case 1:
				n := arg%l.Events + 1
				if lim.AllowN("k", n) {
					adms = append(adms, admission{at: clk.ns.Load(), n: n}) // no Admission: never refunded
				}
			case 2:
				clk.Add(time.Duration(arg) * unit)
			case 3:
				if len(adms) == 0 {
					continue
				}
				a := &adms[len(adms)-1-arg%len(adms)]
				if a.adm.N > 0 && !a.refunded {
					lim.Refund("k", a.adm)
					a.refunded = true
				}
			}
			if ops[i+2]%5 == 0 {
				lim.Take("probe", 1) // other keys' traffic changes nothing for "k"
			}
		}

		var stand []admission
		for _, a := range adms {
			if !a.refunded {
				stand = append(stand, a)
			}
		}
		p := int64(l.Period)
		for i := range stand {
			sum := 0
			for j := i; j < len(stand); j++ {
				sum += stand[j].n
				d := stand[j].at - stand[i].at
				switch k {
				case tokenBucket: // at most Burst + d/Interval
					require.LessOrEqual(t, int64(sum)*int64(l.WithBurst(1).FillTime()), int64(l.BurstSize())*int64(l.WithBurst(1).FillTime())+d,
						"%v: admissions %d..%d over %v", l, i, j, time.Duration(d))
				case slidingWindow: // at most Events in any interval of Period
					if d < p {
						require.LessOrEqual(t, sum, l.Events, "%v: admissions %d..%d within %v", l, i, j, time.Duration(d))
					}
				default: // at most Events in one aligned window
					if absWindow(stand[i].at, l.Period) == absWindow(stand[j].at, l.Period) {
						require.LessOrEqual(t, sum, l.Events, "%v: admissions %d..%d in one window", l, i, j)
					}
				}
			}
		}
	})
}

// FuzzParseLimit: Limit.UnmarshalText reads any text, of any length, without
// panicking, into a valid Limit or an error of bounded length; a Limit it
// reads formats (String) to text that reads back to the same Limit (for a
// zone, the same *time.Location), and formats the same again. A limit per
// period of the calendar builds a FixedWindow, and its window holds the
// time it is asked at.
func FuzzParseLimit(f *testing.F) {
	for _, seed := range []string{"100/min", "10/s burst 20", "5000/1h30m", " 7 / 90s ", "1/d", "0/s", "-1/s",
		"10/s burst", "10/s burst -1", "10/0s", "9223372036854775807/ns", "1/9223372036854775807ns", "10/min burst 20 burst 3",
		"/", "", "1/1", "1/ms burst 1", "3/hour", "2/1h0m0s",
		"10000/month", "500/day in Europe/Bucharest", "7/week in Asia/Tokyo burst 3", "5/hour in UTC", "3/h in America/New_York",
		"1/day in Nowhere/Zone", "1/1h in UTC", "1/month in ../../etc/passwd", "1/day in Local", "1/month in Etc/GMT+2",
		"1/month in  ", "1/week in Europe//Paris", "1/month in UTC in UTC"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		l, err := parseLimit(text)
		if err != nil {
			require.Equal(t, keylimit.Limit{}, l, "a failed parse returns the zero Limit")
			// The text read is at most 128 bytes (maxLimitText); an error quotes
			// it, and a part of it again, at up to 4 bytes a byte (%q's \x1d).
			require.Less(t, len(err.Error()), 2*(4*128+2)+256, "an error quotes a bounded part of the text")
			return
		}
		if l.Calendar != 0 {
			// A limit per period of the calendar is a FixedWindow's.
			w, err := keylimit.NewFixedWindow[string](l)
			require.NoError(t, err, "a parsed Limit is valid")
			w.Close()
			start, end := l.WindowAt(time.Unix(1e9, 0))
			require.True(t, start.Unix() <= 1e9 && end.Unix() > 1e9, "%q: the window at 1e9 s holds it: [%v, %v)", text, start, end)
		} else {
			require.NoError(t, l.Validate(), "a parsed Limit is valid")
		}
		again, err := parseLimit(l.String())
		require.NoError(t, err, "%q, formatted as %q", text, l.String())
		require.Equal(t, l, again, "%q, formatted as %q", text, l.String())
		require.Equal(t, l.String(), again.String())
	})
}
