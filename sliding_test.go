package keylimit_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestSlidingWindowSteps(t *testing.T) {
	// 3 in any 10 s.
	lim, mock := slidingWindow.mock(t, keylimit.Per(3, 10*s))
	runSteps(t, lim, mock, []step{
		{0, "peek", "a", 0, allowed(3, 3, 0)},
		{1 * s, "take", "a", 1, allowed(3, 2, 10*s)},
		{2 * s, "take", "a", 1, allowed(3, 1, 10*s)},
		// 2 do not fit until the entry of 1 s leaves, at 11 s; the window
		// is whole again when the newest (2 s) leaves, at 12 s.
		{4 * s, "take", "a", 2, refused(3, 1, 7*s, 8*s)},
		{4 * s, "take", "a", 1, allowed(3, 0, 10*s)},
		{4 * s, "take", "b", 3, allowed(3, 0, 10*s)}, // keys are independent
		{5 * s, "peek", "a", 0, refused(3, 0, 6*s, 9*s)},
		{11*s - 1, "take", "a", 1, refused(3, 0, 1, 3*s+1)},
		{11 * s, "take", "a", 1, allowed(3, 0, 10*s)},
		// 2 need the entries of 2 s and 4 s gone: at 14 s.
		{11 * s, "take", "a", 2, refused(3, 0, 3*s, 10*s)},
		{12 * s, "peek", "a", 0, allowed(3, 1, 9*s)},
		{14 * s, "take", "a", 2, allowed(3, 0, 10*s)},
		{14 * s, "take", "a", 0, allowed(3, 0, 10*s)},
		{14 * s, "take", "a", 4, refused(3, 0, keylimit.InfDuration, 10*s)},
		{14 * s, "take", "a", -1, refused(3, 0, keylimit.InfDuration, 10*s)},
		{24 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{24 * s, "take", "a", 3, allowed(3, 0, 10*s)},
		{24 * s, "reset", "a", 0, keylimit.Result{}},
		{24 * s, "peek", "a", 0, allowed(3, 3, 0)},
		{24 * s, "peek", "never-seen", 0, allowed(3, 3, 0)},
	})
	require.Equal(t, 1, lim.Stats().Keys, "b: a was reset, and peeks create no key")
}

// TestSlidingWindowNeverExceedsUnderContention: goroutines hammer one key
// with requests of 1 to 3 events while they also move the clock forward.
// Each admission was decided between two clock readings taken around the
// call; for every admission j, the events whose calls began after
// after_j − Period and ended by after_j all lie in (after_j − Period,
// after_j], and must number at most Events.
func TestSlidingWindowNeverExceedsUnderContention(t *testing.T) {
	l := keylimit.Per(20, s)
	clk := newFastClock()
	lim := slidingWindow.on(t, clk, l)
	var (
		mu   sync.Mutex
		adms []timedAdmission
		wg   sync.WaitGroup
	)
	t0 := clk.Now()
	end := t0.Add(20 * s).UnixNano()
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				if rng.IntN(40) == 0 {
					clk.Add(time.Duration(1+rng.IntN(13)) * ms)
				}
				before := clk.Now().UnixNano()
				if before > end {
					return
				}
				n := 1 + rng.IntN(3)
				ok := lim.AllowN("hot", n)
				after := clk.Now().UnixNano()
				if ok {
					mu.Lock()
					adms = append(adms, timedAdmission{before, after, n})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	checkSlidingBound(t, adms, l.Events, l.Period)
	events := 0
	for _, a := range adms {
		events += a.n
	}
	elapsed := clk.Now().Sub(t0)
	require.Greater(t, events, int(elapsed/l.Period)*l.Events*3/4, "the window admits as the clock moves")
}

// TestSlidingWindowExactUnderWriters: 32 goroutines on one key of a frozen
// clock, every kind of writer at once (admissions of 1 and 2 events,
// refunds of some of them, Peeks that may take the lock): the events
// admitted less those refunded are exactly Events once the key is full.
// The admissions' lock is a CAS of the log's seq; a writer that bypassed
// it, or a judgement kept after another writer ran, would admit more.
func TestSlidingWindowExactUnderWriters(t *testing.T) {
	const events = 400
	lim := slidingWindow.on(t, newFastClock(), keylimit.PerHour(events)).(*keylimit.SlidingWindow[string])
	var admitted, refunded atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 300 {
				switch (g + i) % 4 {
				case 0:
					if lim.Allow("hot") {
						admitted.Add(1)
					}
				case 1:
					if lim.AllowN("hot", 2) {
						admitted.Add(2)
					}
				case 2:
					r, a := lim.Admit("hot", 1)
					if r.Allowed {
						admitted.Add(1)
						if i%3 == 0 {
							lim.Refund("hot", a)
							refunded.Add(1)
						}
					}
				default:
					lim.Peek("hot")
				}
			}
		})
	}
	wg.Wait()
	for lim.Allow("hot") {
		admitted.Add(1)
	}
	require.Positive(t, refunded.Load(), "refunds made")
	require.Equal(t, int64(events), admitted.Load()-refunded.Load(), "events admitted (%d) less those refunded (%d)", admitted.Load(), refunded.Load())
	require.Equal(t, 0, lim.Peek("hot").Remaining, "Remaining once full")
}

// TestSlidingWindowRandomizedExact plays long random sequences of requests
// on one goroutine, with the clock stepping forward by random amounts (and
// now and then back), and checks every decision against the definition:
// admitted iff the events in the key's window plus n are at most Events. So
// no request is refused while fewer than Events − n + 1 are in its window,
// none is admitted otherwise, and RetryAfter is exact. It also checks every
// admitted event's time: no interval of length Period holds more than
// Events.
func TestSlidingWindowRandomizedExact(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		l := keylimit.Per(1+rng.IntN(60), time.Duration(1+rng.IntN(5000))*ms)
		mock := newFastClock()
		lim := slidingWindow.on(t, mock, l)
		ref := newRefSliding(l)
		t0 := mock.Now()
		var times []int64 // every admitted event, in order
		var latest int64  // the limiter's time: the latest the clock read
		for i := range 3000 {
			switch rng.IntN(10) {
			case 0:
				mock.Add(-time.Duration(rng.Int64N(int64(l.Period) / 4)))
			default:
				mock.Add(time.Duration(rng.Int64N(int64(l.Period) / 5)))
			}
			now := max(int64(mock.Now().Sub(t0)), latest)
			latest = now
			n := 1 + rng.IntN(min(l.Events, 4))
			got, want := lim.Take("k", n), ref.take("k", n, now)
			require.Equal(t, want, got, "seed %d, call %d: Take(%d) at %v with %v", seed, i, n, time.Duration(now), l)
			if got.Allowed {
				log := ref.keys["k"].log
				for range n {
					times = append(times, log[len(log)-1])
				}
			}
		}
		// Recorded times never go back, so a window of Period starting at
		// times[i] holds times[i..j] with times[j] < times[i] + Period.
		for i, j := 0, 0; i < len(times); i++ {
			for j < len(times) && times[j] < times[i]+int64(l.Period) {
				j++
			}
			require.LessOrEqual(t, j-i, l.Events, "seed %d: events in [%v, %v + %v)", seed, time.Duration(times[i]), time.Duration(times[i]), l.Period)
		}
		require.Greater(t, len(times), l.Events, "seed %d admits", seed)
	}
}

// TestSlidingWindowRefundsItsEntries: a refund takes the admission's own
// entries off the log, whatever came after; an entry a full log pushed out,
// already out of the window, does not come back.
func TestSlidingWindowRefundsItsEntries(t *testing.T) {
	lim, mock := slidingWindow.mock(t, keylimit.Per(3, 10*s))
	runSteps(t, lim, mock, []step{
		{0, "admit", "k", 1, verdict(true)},
		{2 * s, "admit", "k", 2, verdict(true)},
		{2 * s, "refund", "k", 2, keylimit.Result{}}, // the entry of 0 s goes
		{2 * s, "peek", "k", 0, allowed(3, 1, 10*s)},
		{2 * s, "refund", "k", 1, keylimit.Result{}}, // and those of 2 s
		{2 * s, "peek", "k", 0, allowed(3, 3, 0)},
		// A full log: the admission of 12 s pushed out an entry of 2 s,
		// which had left the window; it does not come back.
		{2 * s, "admit", "k", 3, verdict(true)},
		{12 * s, "admit", "k", 1, verdict(true)},
		{12 * s, "refund", "k", 1, keylimit.Result{}},
		{12 * s, "peek", "k", 0, allowed(3, 3, 0)},
		// The entries of 2 s left the window: refunding them later gives
		// back nothing the window still counts.
		{12 * s, "admit", "k", 3, verdict(true)},
		{12 * s, "refund", "k", 3, keylimit.Result{}},
		{12 * s, "allow", "k", 1, verdict(false)},
	})
}

func TestSlidingWindowSetLimitKeepsTheTimes(t *testing.T) {
	lim, mock := slidingWindow.mock(t, keylimit.Per(4, 10*s))
	t0 := mock.Now()
	at := func(d time.Duration) { mock.Set(t0.Add(d)) }
	at(1 * s)
	require.True(t, lim.Allow("k"))
	at(2 * s)
	require.True(t, lim.Allow("k"))
	at(3 * s)
	require.True(t, lim.AllowN("k", 2)) // entries at 1, 2, 3 and 3 s

	// Raised: the 4 entries stay, 2 more fit at once.
	require.NoError(t, lim.SetLimit(keylimit.Per(6, 10*s)))
	require.Equal(t, refilled(allowed(6, 2, 10*s), 8*s), lim.Peek("k"), "the entry of 1 s leaves at 11 s")

	// Lowered to 2: the newest 2 entries, at 3 s, decide: 1 fits at 13 s.
	require.NoError(t, lim.SetLimit(keylimit.Per(2, 10*s)))
	at(4 * s)
	require.Equal(t, refilled(refused(2, 0, 9*s, 9*s), 9*s), lim.Take("k", 1))

	// Raised back to 4: the 2 entries the small log had no room for come
	// back at 3 s, later than they came (1 and 2 s): nothing fits before
	// 13 s, where without them 1 would at 11 s, 2 at 12 s.
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 10*s)))
	at(11 * s)
	require.Equal(t, refilled(refused(4, 0, 2*s, 2*s), 2*s), lim.Take("k", 1))
	at(13 * s)
	require.Equal(t, refilled(allowed(4, 0, 10*s), 10*s), lim.Take("k", 4))

}

func TestSlidingWindowSetLimitNewPeriod(t *testing.T) {
	// A new Period judges the same times; a key idle under its old limit
	// starts afresh.
	lim, mock := slidingWindow.mock(t, keylimit.Per(4, 10*s))
	t0 := mock.Now()
	mock.Set(t0.Add(3 * s))
	require.True(t, lim.AllowN("k", 4))
	mock.Set(t0.Add(7 * s))
	require.True(t, lim.AllowN("q", 4))
	mock.Set(t0.Add(9 * s))
	require.Equal(t, refilled(refused(4, 0, 4*s, 4*s), 4*s), lim.Peek("k"), "4 in the window (−1 s, 9 s]")
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 5*s)))
	require.Equal(t, allowed(4, 4, 0), lim.Peek("k"), "none in the window (4 s, 9 s]")
	require.Equal(t, refilled(refused(4, 0, 3*s, 3*s), 3*s), lim.Peek("q"), "q's 4 at 7 s are in it")
	require.NoError(t, lim.SetLimit(keylimit.Per(4, 10*s)))
	require.Equal(t, refilled(refused(4, 0, 8*s, 8*s), 8*s), lim.Peek("q"), "q kept its times")
	require.Equal(t, allowed(4, 4, 0), lim.Peek("k"),
		"k was idle under its last limit, which the evictor could have forgotten: it starts afresh")
}
