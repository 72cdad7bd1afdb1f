package keylimit_test

import (
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestSlidingWindowSteps(t *testing.T) {
	// 3 in any 10 s.
	lim, mock := newMock(t, keylimit.NewSlidingWindow[string], keylimit.Per(3, 10*s))
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
	require.Equal(t, 1, lim.Len(), "b: a was reset, and peeks create no key")
}

func TestSlidingWindowClockStepsBack(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingWindow[string], keylimit.PerMinute(3))
	t0 := mock.Now()
	mock.Set(t0.Add(30 * s))
	require.True(t, lim.Allow("k"))
	mock.Set(t0.Add(100 * s))
	require.True(t, lim.AllowN("k", 2))
	at100 := lim.Peek("k")
	require.Equal(t, allowed(3, 1, time.Minute), at100, "the entry of 30 s has left")

	// Back to 20 s: the key keeps deciding at 100 s, its latest time. The
	// entries of 100 s, newer than now, count; no capacity reopens.
	mock.Set(t0.Add(20 * s))
	require.Equal(t, allowed(3, 1, 140*s), lim.Peek("k"))
	require.Equal(t, allowed(3, 0, 140*s), lim.Take("k", 1), "recorded at 100 s, not at 20 s")
	require.Equal(t, refused(3, 0, 140*s, 140*s), lim.Take("k", 1))

	// Far before the creation and far after: no panic.
	mock.Set(t0.AddDate(-1000, 0, 0))
	require.False(t, lim.Allow("k"))
	mock.Set(t0.Add(160*s - 1))
	require.False(t, lim.Allow("k"), "stepping back and forth reopens nothing")
	mock.Set(t0.Add(160 * s))
	require.True(t, lim.AllowN("k", 3))
	mock.Set(t0.AddDate(1000, 0, 0))
	require.True(t, lim.AllowN("k", 3))
	require.False(t, lim.Allow("k"))
}

func TestSlidingWindowExactUnderContentionFrozenClock(t *testing.T) {
	// The quota is the largest a SlidingWindow takes, a third of the
	// attempts: admissions race for a long stretch.
	testExactUnderContention(t, newFrozen(t, keylimit.NewSlidingWindow[string], keylimit.PerHour(keylimit.MaxSlidingWindowEvents)), keylimit.MaxSlidingWindowEvents)
}

func TestSlidingWindowExactUnderContentionMixedN(t *testing.T) {
	testExactUnderContentionMixedN(t, newFrozen(t, keylimit.NewSlidingWindow[string], keylimit.PerHour(9_996)), 9_996)
}

// TestSlidingWindowNeverExceedsUnderContention: goroutines hammer one key
// with requests of 1 to 3 events while they also move the clock forward.
// Each admission was decided between two clock readings taken around the
// call; for every admission j, the events whose calls began after
// after_j − Period and ended by after_j all lie in (after_j − Period,
// after_j], and must number at most Events.
func TestSlidingWindowNeverExceedsUnderContention(t *testing.T) {
	l := keylimit.Per(20, s)
	mock := newFastClock()
	lim := newFrozenAt(t, keylimit.NewSlidingWindow[string], l, mock)
	type admission struct {
		before, after time.Duration
		n             int
	}
	var (
		mu   sync.Mutex
		adms []admission
		wg   sync.WaitGroup
	)
	t0 := mock.Now()
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				if rng.IntN(40) == 0 {
					mock.Add(time.Duration(1+rng.IntN(13)) * ms)
				}
				before := mock.Now().Sub(t0)
				if before > 20*s {
					return
				}
				n := 1 + rng.IntN(3)
				ok := lim.AllowN("hot", n)
				after := mock.Now().Sub(t0)
				if ok {
					mu.Lock()
					adms = append(adms, admission{before, after, n})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	sort.Slice(adms, func(i, j int) bool { return adms[i].after < adms[j].after })
	events := 0
	for j, a := range adms {
		events += a.n
		in := 0
		for _, b := range adms[:j+1] {
			if b.before > a.after-l.Period {
				in += b.n
			}
		}
		if in > l.Events {
			t.Fatalf("%d events admitted in (%v, %v], limit %d", in, a.after-l.Period, a.after, l.Events)
		}
	}
	elapsed := mock.Now().Sub(t0)
	require.Greater(t, events, int(elapsed/l.Period)*l.Events*3/4, "the window admits as the clock moves")
}

// newFrozenAt is newFrozen on a given fastClock.
func newFrozenAt[L interface{ Close() error }](t testing.TB, ctor constructor[L], l keylimit.Limit, c *fastClock) L {
	t.Helper()
	lim, err := ctor(l, keylimit.WithClock(c))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, lim.Close()) })
	return lim
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
		lim := newFrozenAt(t, keylimit.NewSlidingWindow[string], l, mock)
		ref := newRefSliding(l)
		t0 := mock.Now()
		var times []int64 // every admitted event, in order
		for i := range 3000 {
			switch rng.IntN(10) {
			case 0:
				mock.Add(-time.Duration(rng.Int64N(int64(l.Period) / 4)))
			default:
				mock.Add(time.Duration(rng.Int64N(int64(l.Period) / 5)))
			}
			now := int64(mock.Now().Sub(t0))
			n := 1 + rng.IntN(min(l.Events, 4))
			got, want := lim.Take("k", n), ref.take("k", n, now)
			if got != want {
				t.Fatalf("seed %d, call %d: Take(%d) at %v with %v = %+v, want %+v", seed, i, n, time.Duration(now), l, got, want)
			}
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
			if j-i > l.Events {
				t.Fatalf("seed %d: %d events in [%v, %v + %v), limit %d", seed, j-i, time.Duration(times[i]), time.Duration(times[i]), l.Period, l.Events)
			}
		}
		require.Greater(t, len(times), l.Events, "seed %d admits", seed)
	}
}

func TestSlidingWindowAllocs(t *testing.T) {
	testAllocs(t, keylimit.NewSlidingWindow[string], keylimit.PerHour(keylimit.MaxSlidingWindowEvents), keylimit.PerHour(1))
}

func TestSlidingWindowRefund(t *testing.T) {
	lim, mock := newMock(t, keylimit.NewSlidingWindow[string], keylimit.Per(3, 10*s))
	require.True(t, lim.Allow("k"))
	mock.Add(2 * s)
	require.True(t, lim.AllowN("k", 2))
	lim.Refund("k", 1) // the newest, of 2 s, goes
	require.Equal(t, allowed(3, 1, 10*s), lim.Peek("k"))
	lim.Refund("k", 10)
	require.Equal(t, allowed(3, 3, 0), lim.Peek("k"), "never beyond the full quota")
	lim.Refund("never-seen", 1)
	lim.Refund("k", 0)
	require.Equal(t, 1, lim.Len(), "Refund creates no key")

	// A full ring: the refunded admission had pushed out an entry that had
	// left the window; it does not come back.
	require.True(t, lim.AllowN("k", 3))
	mock.Add(10 * s)
	require.True(t, lim.Allow("k"))
	lim.Refund("k", 1)
	require.Equal(t, allowed(3, 3, 0), lim.Peek("k"))
}
