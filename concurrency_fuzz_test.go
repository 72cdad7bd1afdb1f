package keylimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// refConc is a concurrency limiter written the plain way, to check
// Concurrency against: a list of every acquisition, and a key holds the
// slots of those not released and not yet taken back. With a longest hold
// d, an acquisition at time t is taken back from the start of epoch
// floor(t/d) + 2 (time in ns since the limiter's creation); its Release
// from then on gives back nothing. A key is tracked from its first
// acquisition (admitted or not) until a sweep at the key cap finds it
// holding nothing.
type refConc struct {
	limit   int
	maxHold int64
	cap     int
	holds   []refHold
	tracked map[string]bool
	// admitted, refused and reclaimed are what Stats should say.
	admitted, refused uint64
}

type refHold struct {
	key      string
	n        int
	epoch    int64
	released bool
}

func (r *refConc) epoch(now int64) int64 {
	if r.maxHold == 0 {
		return 0
	}
	return now / r.maxHold
}

// live reports whether h still holds its slots at now.
func (r *refConc) live(h refHold, now int64) bool {
	return !h.released && r.epoch(now)-h.epoch < 2
}

func (r *refConc) held(key string, now int64) int {
	n := 0
	for _, h := range r.holds {
		if h.key == key && r.live(h, now) {
			n += h.n
		}
	}
	return n
}

// track makes room for key if it is new: at the cap, every key holding
// nothing is forgotten. It reports false if no room was found.
func (r *refConc) track(key string, now int64) bool {
	if r.tracked[key] {
		return true
	}
	if len(r.tracked) == r.cap {
		for k := range r.tracked {
			if r.held(k, now) == 0 {
				delete(r.tracked, k)
			}
		}
	}
	if len(r.tracked) == r.cap {
		return false
	}
	r.tracked[key] = true
	return true
}

func (r *refConc) peek(key string, now int64) keylimit.Result {
	free := max(r.limit-r.held(key, now), 0)
	return keylimit.Result{Allowed: free >= 1, Limit: r.limit, Remaining: free}
}

// tryAcquire is TryAcquire; it returns the index of the hold if admitted,
// else -1. RetryAfter is left out: the limiter's is an estimate.
func (r *refConc) tryAcquire(key string, n int, now int64) (keylimit.Result, int) {
	switch {
	case n == 0:
		res := r.peek(key, now)
		res.Allowed = true
		return res, -1
	case n < 0 || n > r.limit:
		r.refused++
		res := r.peek(key, now)
		res.Allowed = false
		return res, -1
	case !r.track(key, now):
		r.refused++
		return keylimit.Result{Limit: r.limit, Untracked: true}, -1
	}
	held := r.held(key, now)
	if held+n > r.limit {
		r.refused++
		return keylimit.Result{Limit: r.limit, Remaining: max(r.limit-held, 0)}, -1
	}
	r.admitted++
	r.holds = append(r.holds, refHold{key: key, n: n, epoch: r.epoch(now)})
	return keylimit.Result{Allowed: true, Limit: r.limit, Remaining: r.limit - held - n}, len(r.holds) - 1
}

func (r *refConc) release(i int, now int64) {
	r.holds[i].released = r.holds[i].released || r.live(r.holds[i], now)
}

// reclaimed is the slots taken back by now: those of the holds not
// released before their epoch was two behind.
func (r *refConc) reclaimed(now int64) uint64 {
	n := 0
	for _, h := range r.holds {
		if r.live(h, now) || h.released {
			continue
		}
		n += h.n
	}
	return uint64(n)
}

// sameResult requires got to be want but for RetryAfter, which is checked
// for its kind: 0 when allowed, InfDuration when n can never pass, a finite
// estimate above 0 otherwise (a key the cap leaves untracked says when a
// place may free up, which the model does not follow).
func sameResult(t *testing.T, want, got keylimit.Result, never bool, what string, args ...any) {
	t.Helper()
	retry := got.RetryAfter
	got.RetryAfter = 0
	if got != want {
		require.Equal(t, want, got, append([]any{what}, args...)...)
	}
	switch {
	case want.Allowed:
		require.Zero(t, retry, append([]any{what + ": RetryAfter"}, args...)...)
	case never:
		require.Equal(t, keylimit.InfDuration, retry, append([]any{what + ": RetryAfter"}, args...)...)
	default:
		if retry <= 0 || retry == keylimit.InfDuration {
			require.Fail(t, "RetryAfter is no estimate", append([]any{what + ": RetryAfter %v"}, append([]any{retry}, args...)...)...)
		}
	}
}

var concFuzzHolds = []time.Duration{0, time.Second, 7 * time.Millisecond, time.Minute, 333 * time.Nanosecond}

// FuzzConcurrency runs random sequences of TryAcquire, Acquire (when it
// would not wait, and under an ended context), Release (again and again
// of the same Permit too), Peek, SetLimit and clock moves (forward and
// back) on three keys, at a cap of 3 keys (an op asks for a fourth, which
// sweeps), with and without a longest hold, and checks every Result, Len
// and the Stats against refConc's. The clock moves less than 2^20
// longest holds in all: a key's word records its epoch mod 2^22 (see
// concCore.advance).
func FuzzConcurrency(f *testing.F) {
	f.Add(uint8(3), uint8(0), []byte{0, 0, 1, 0, 0, 2, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 3, 2, 0, 0})
	f.Add(uint8(2), uint8(1), []byte{0, 0, 2, 0, 1, 1, 4, 0, 7, 3, 0, 0, 4, 0, 7, 0, 0, 1, 1, 1, 0, 5, 0, 0})
	f.Add(uint8(5), uint8(3), []byte{0, 0, 3, 0, 1, 5, 6, 0, 1, 0, 2, 2, 4, 0, 10, 7, 0, 0, 0, 0, 5, 4, 0, 20, 1, 0, 0, 3, 0, 0})
	f.Add(uint8(4), uint8(2), []byte{0, 0, 4, 8, 0, 2, 2, 0, 3, 1, 0, 0, 8, 0, 9, 0, 1, 9, 7, 0, 0, 4, 0, 14, 0, 2, 1, 1, 0, 1})
	// At the cap, a sweep in epoch 1 finds a key holding only slots of
	// epoch 0: it is idle from epoch 2, when the next key must find room.
	// (The sweep once said epoch 3, and the key stayed untracked.)
	f.Add(uint8(1), uint8(3), []byte{0, 0, 2, 5, 0, 8, 0, 1, 2, 0, 2, 2, 7, 0, 0, 5, 0, 7, 7, 0, 0})
	f.Fuzz(func(t *testing.T, limit, hold uint8, ops []byte) {
		mock := newFastClock()
		maxHold := concFuzzHolds[int(hold)%len(concFuzzHolds)]
		ref := &refConc{limit: int(limit%20) + 1, maxHold: int64(maxHold), cap: 3, tracked: map[string]bool{}}
		c, err := keylimit.NewConcurrency[string](ref.limit, keylimit.WithClock(mock), keylimit.WithMaxHold(maxHold),
			keylimit.WithMaxKeys(3), keylimit.WithEvictionInterval(0), keylimit.WithStats(), quiet)
		require.NoError(t, err)
		defer c.Close()
		t0 := mock.Now()
		unit := time.Second / 7
		if maxHold > 0 {
			unit = max(maxHold/7, 1) // steps land inside epochs, not only on their edges
		}
		keys := []string{"a", "b", "c"}
		var permits []keylimit.Permit
		var refIdx []int // each permit's hold in ref, or -1
		var latest int64 // the limiter's time never goes back: the latest it read
		var moved int64  // how far the clock went forward in all
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		for i := 0; i+2 < len(ops); i += 3 {
			key, arg := keys[int(ops[i+1])%len(keys)], int(ops[i+2])
			now := max(int64(mock.Now().Sub(t0)), latest)
			op := ops[i] % 9
			switch op {
			case 0, 1: // TryAcquire; 1: Acquire when it would not wait
				n := arg%(ref.limit+3) - 1 // -1 .. limit+1
				if op == 1 {
					n = arg%ref.limit + 1
					if !ref.tracked[key] && len(ref.tracked) == ref.cap || ref.held(key, now)+n > ref.limit {
						// It would wait: ask under an ended context,
						// which fails at once and decides nothing.
						_, err := c.Acquire(ended, key, n)
						require.ErrorIs(t, err, context.Canceled, "op %d", i/3)
						continue
					}
					// It must not wait: a wait that has not ended in a
					// second of real time fails the run.
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					p, err := c.Acquire(ctx, key, n)
					cancel()
					require.NoError(t, err, "op %d: Acquire(%q, %d) at %v, %d held of %d", i/3, key, n, time.Duration(now), ref.held(key, now), ref.limit)
					_, idx := ref.tryAcquire(key, n, now)
					permits, refIdx = append(permits, p), append(refIdx, idx)
					break
				}
				p, got := c.TryAcquire(key, n)
				want, idx := ref.tryAcquire(key, n, now)
				sameResult(t, want, got, n < 0 || n > ref.limit, "op %d: TryAcquire(%q, %d) at %v", i/3, key, n, time.Duration(now))
				if got.Allowed && n > 0 {
					permits, refIdx = append(permits, p), append(refIdx, idx)
				} else {
					require.Equal(t, keylimit.Permit{}, p, "op %d: the Permit of a decision that holds nothing", i/3)
				}
			case 2, 3: // Release of an acquisition, perhaps released before
				if len(permits) == 0 {
					continue
				}
				j := arg % len(permits)
				permits[j].Release()
				if refIdx[j] >= 0 {
					ref.release(refIdx[j], now)
				}
			case 4:
				got := c.Peek(key)
				sameResult(t, ref.peek(key, now), got, false, "op %d: Peek(%q) at %v", i/3, key, time.Duration(now))
			case 5:
				if moved += int64(arg) * int64(unit); moved < 1<<20*max(int64(maxHold), 1) {
					mock.Add(time.Duration(arg) * unit)
				}
				continue
			case 6:
				mock.Add(-time.Duration(arg) * unit) // the clock steps back
				continue
			case 7: // a fourth key: at the cap, a sweep
				p, got := c.TryAcquire("probe", 1)
				want, idx := ref.tryAcquire("probe", 1, now)
				sameResult(t, want, got, false, "op %d: TryAcquire(probe) at %v", i/3, time.Duration(now))
				p.Release()
				if idx >= 0 {
					ref.release(idx, now)
				}
			case 8:
				l := arg%20 + 1
				require.NoError(t, c.SetLimit(l))
				ref.limit = l
			}
			// Not every op reads the clock (a second Release does not): a
			// Peek does, so that the limiter's latest time is the model's.
			c.Peek("clock")
			latest = now
			require.Equal(t, len(ref.tracked), c.Stats().Keys, "op %d: Len", i/3)
		}
		// Every hold is past its longest hold: a write on every key takes
		// back the rest, and the counts agree.
		if maxHold > 0 {
			mock.Add(3 * maxHold)
			now := max(int64(mock.Now().Sub(t0)), latest)
			for _, k := range append(keys, "probe") {
				p, _ := c.TryAcquire(k, 1)
				_, idx := ref.tryAcquire(k, 1, now)
				p.Release()
				if idx >= 0 {
					ref.release(idx, now)
				}
			}
			require.Equal(t, ref.reclaimed(now), c.Stats().Reclaimed, "slots taken back")
		}
		st := c.Stats()
		require.Equal(t, ref.admitted, st.Admitted, "admitted")
		require.Equal(t, ref.refused, st.Refused, "refused")
	})
}
