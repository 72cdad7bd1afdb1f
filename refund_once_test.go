package keylimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// refunders returns every in-memory limiter that makes Admissions, each of
// 10 an hour on a mock clock: the four types, All of two of them, and a
// Penalty around a bucket.
func refunders(t *testing.T) map[string]keylimit.Refunder[string] {
	m := map[string]keylimit.Refunder[string]{}
	for _, k := range kinds {
		lim, _ := k.mock(t, keylimit.PerHour(10))
		m[k.name] = lim
	}
	mock := clock.NewMock()
	all := keylimit.All[string](tokenBucket.make(t, keylimit.PerHour(10), keylimit.WithClock(mock)),
		slidingWindow.make(t, keylimit.PerHour(10), keylimit.WithClock(mock)))
	m["All"] = all.(keylimit.Refunder[string])
	p, err := keylimit.NewPenalty[string](tokenBucket.make(t, keylimit.PerHour(10), keylimit.WithClock(clock.NewMock())),
		keylimit.Ban{Refusals: 100, Within: time.Hour, For: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	m["Penalty"] = p
	return m
}

// remaining is lim's Remaining for key.
func remaining(lim keylimit.Refunder[string], key string) int {
	return lim.(keylimit.Limiter[string]).Peek(key).Remaining
}

// TestRefundGivesBackOnce pins issue 37.8: in memory as on Redis, an
// Admission gives back at most what it took, once. A second Refund of it,
// or of a copy, or of a copy with N lowered, gives back nothing; a copy
// with N raised gives back no more than was admitted; a refused request's
// Admission gives back nothing. Before, a second in-memory Refund gave
// back again (up to 9 of a bound of 10 here).
func TestRefundGivesBackOnce(t *testing.T) {
	for name, lim := range refunders(t) {
		t.Run(name, func(t *testing.T) {
			_, a := lim.Admit("twice", 3)
			_, b := lim.Admit("twice", 4)
			require.Equal(t, 3, remaining(lim, "twice"))
			lim.Refund("twice", a)
			require.Equal(t, 6, remaining(lim, "twice"), "the first Refund")
			lim.Refund("twice", a)
			require.Equal(t, 6, remaining(lim, "twice"), "a second Refund")
			c := a
			lim.Refund("twice", c)
			part := a
			part.N = 1
			lim.Refund("twice", part)
			require.Equal(t, 6, remaining(lim, "twice"), "a copy's Refund, and a partial copy's")
			lim.Refund("twice", b)
			lim.Refund("twice", b)
			require.Equal(t, 10, remaining(lim, "twice"), "b's Refunds")

			// A partial Refund is the Admission's one Refund.
			_, a = lim.Admit("partial", 5)
			part = a
			part.N = 2
			lim.Refund("partial", part)
			require.Equal(t, 7, remaining(lim, "partial"), "2 of 5 given back")
			lim.Refund("partial", a)
			require.Equal(t, 7, remaining(lim, "partial"), "the whole after the part")

			// A raised N is ignored: never more than was admitted.
			_, a = lim.Admit("raised", 7)
			require.True(t, lim.(keylimit.Limiter[string]).Allow("raised"))
			a.N = 9
			lim.Refund("raised", a)
			require.Equal(t, 9, remaining(lim, "raised"), "7 given back, not 9")

			r, _ := lim.Admit("refused", 7)
			require.True(t, r.Allowed)
			r, refused := lim.Admit("refused", 4)
			require.False(t, r.Allowed)
			lim.Refund("refused", refused)
			require.Equal(t, 3, remaining(lim, "refused"), "a refused Admission's Refund")
		})
	}
}

// TestRefundOfCopiesGivesBackOnce: 64 goroutines refund copies of one
// Admission at once: exactly one gives back.
func TestRefundOfCopiesGivesBackOnce(t *testing.T) {
	for name, lim := range refunders(t) {
		t.Run(name, func(t *testing.T) {
			for round := range 20 {
				key := "copies-" + string(rune('a'+round))
				_, a := lim.Admit(key, 3)
				_, _ = lim.Admit(key, 4)
				var wg sync.WaitGroup
				for range 64 {
					c := a
					wg.Go(func() { lim.Refund(key, c) })
				}
				wg.Wait()
				require.Equal(t, 6, remaining(lim, key), "round %d: 3 of 7 given back, once", round)
			}
		})
	}
}

// TestRefundOnceAcrossBlocks: 300 admissions of one key, more than the 64
// that share one block of onces, each refunded by 4 goroutines at once
// through copies: each gives back its event once, and the key is whole
// again, exactly.
func TestRefundOnceAcrossBlocks(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			l, _ := k.mock(t, keylimit.PerHour(300))
			lim := l.(keylimit.Refunder[string])
			adms := make([]keylimit.Admission, 300)
			for i := range adms {
				var r keylimit.Result
				r, adms[i] = lim.Admit("many", 1)
				require.True(t, r.Allowed, "admission %d", i)
			}
			require.Zero(t, remaining(lim, "many"))
			var wg sync.WaitGroup
			for _, a := range adms {
				for range 4 {
					c := a
					wg.Go(func() { lim.Refund("many", c) })
				}
			}
			wg.Wait()
			require.Equal(t, 300, remaining(lim, "many"), "each admission given back once")
			_, a := lim.Admit("many", 300)
			lim.Refund("many", adms[0])
			require.Zero(t, remaining(lim, "many"), "an old Admission's second Refund gives back nothing")
			lim.Refund("many", a)
			require.Equal(t, 300, remaining(lim, "many"))
		})
	}
}
