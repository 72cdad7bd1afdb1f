package keylimit_test

import (
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
