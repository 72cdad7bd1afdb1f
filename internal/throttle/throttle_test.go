package throttle

import (
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1e9, 0)

// The probability of the formula, step by step on a frozen clock: a fresh
// key is never rejected; each failure raises the probability to n/(n+1);
// accepts at half the requests or more (K 2) bring it to 0; a rejected
// request counts; a forgotten one does not.
func TestAdmitFollowsTheFormula(t *testing.T) {
	cfg := Config{K: 2, MaxKeys: 10}
	var c Counts
	steps := []struct {
		u       float64
		outcome Outcome
		p       float64
		send    bool
	}{
		{0, Failed, 0, true},             // 0 requests
		{0.5, Failed, 1.0 / 2, true},     // 1 request, 0 accepts
		{0.5, Failed, 2.0 / 3, false},    // rejected: counts, no outcome
		{0.99, Forgotten, 3.0 / 4, true}, // forgotten: as if never counted
		{0.99, Accepted, 3.0 / 4, true},  // 4 requests, 1 accept
		{0, Accepted, (4 - 2*1) / 5.0, false},
		{0.99, Accepted, (5 - 2*1) / 6.0, true}, // 6 requests, 2 accepts
		{0, Accepted, (6 - 2*2) / 7.0, false},   // 7, 2
		{0, Accepted, (7 - 2*2) / 8.0, false},   // 8, 2
		{0.9, Accepted, (8 - 2*2) / 9.0, true},  // 9, 3
		{0.9, Accepted, (9 - 2*3) / 10.0, true}, // 10, 4
		{0.9, Accepted, (10 - 2*4) / 11.0, true},
		{0.9, Accepted, (11 - 2*5) / 12.0, true},
		{0, Accepted, 0, true}, // 12 requests, 6 accepts: half, not below
	}
	for i, s := range steps {
		d := c.Admit("k", t0, cfg, s.u)
		require.InDelta(t, s.p, d.P, 1e-12, "step %d", i)
		require.Equal(t, s.send, d.Send, "step %d", i)
		if d.Send {
			c.Record("k", s.outcome, t0, cfg)
		}
	}
}

// Counts decay by e each Window, requests and accepts alike; a clock that
// steps back decays nothing and raises no count.
func TestCountsDecay(t *testing.T) {
	cfg := Config{K: 2, Window: time.Second, MaxKeys: 10}
	var c Counts
	for _, o := range []Outcome{Failed, Failed, Accepted, Accepted} {
		c.Record("k", o, t0, cfg)
	}
	d := c.Admit("k", t0.Add(time.Second), cfg, 1)
	require.InDelta(t, 4/math.E, d.Requests, 1e-12)
	require.InDelta(t, 2/math.E, d.Accepts, 1e-12)
	c.Record("k", Failed, t0, cfg) // back in time: no decay
	d = c.Admit("k", t0.Add(time.Second), cfg, 1)
	require.InDelta(t, 4/math.E+1, d.Requests, 1e-12, "the counts stay at their latest time")
}

// A request counts when its outcome comes: not while it is out, nor if it
// is Forgotten.
func TestARequestCountsWithItsOutcome(t *testing.T) {
	cfg := Config{K: 2, MaxKeys: 10}
	var c Counts
	require.True(t, c.Admit("k", t0, cfg, 0).Send)
	require.Zero(t, c.Admit("k", t0, cfg, 0).Requests, "a request in flight counts nothing")
	c.Record("k", Forgotten, t0, cfg)
	require.Zero(t, c.Admit("k", t0, cfg, 0).Requests)
	c.Record("k", Failed, t0, cfg)
	require.Equal(t, 1.0, c.Admit("k", t0, cfg, 0).Requests)
}

// Config.Check refuses a K below 1 (it would refuse a partner that accepts
// everything), not finite, or a negative window.
func TestConfigCheck(t *testing.T) {
	for _, k := range []float64{0, 1, 2, 10} {
		require.NoError(t, Config{K: k}.Check("x.Throttle"))
	}
	for _, k := range []float64{0.5, -1, math.NaN(), math.Inf(1)} {
		require.ErrorContains(t, Config{K: k}.Check("x.Throttle"), "x.Throttle is ")
	}
	require.EqualError(t, Config{K: 2, Window: -1}.Check("x.Throttle"), "x.ThrottleWindow is -1ns: it must not be negative")
}

// 64 goroutines count 500 requests each on one key, and the partner
// accepts every other one: on a frozen clock the counts are exact.
func TestCountsUnderManyGoroutines(t *testing.T) {
	const goroutines, each = 64, 500
	cfg := Config{K: 2, MaxKeys: 10}
	var c Counts
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				d := c.Admit("k", t0, cfg, 1) // u 1: never rejected
				o := Failed
				if (g+i)%2 == 0 {
					o = Accepted
				}
				if d.Send {
					c.Record("k", o, t0, cfg)
				}
			}
		})
	}
	wg.Wait()
	d := c.Admit("k", t0, cfg, 1)
	require.Equal(t, float64(goroutines*each), d.Requests)
	require.Equal(t, float64(goroutines*each/2), d.Accepts)
}

// A flood of distinct keys never holds more than MaxKeys, and the sweeps
// visit a bounded number of keys per key added; idle keys are forgotten
// first, so a key still counted survives a flood of new ones that go idle.
func TestKeysAreBounded(t *testing.T) {
	const limit, flood = 1000, 20_000
	cfg := Config{K: 2, Window: time.Millisecond, MaxKeys: limit}
	var c Counts
	for i := range flood {
		now := t0.Add(time.Duration(i) * 10 * time.Microsecond) // idle after 5 ms: 500 keys later
		c.Record(strconv.Itoa(i), Failed, now, cfg)
		c.Record("busy", Failed, now, cfg)
		n, _, _ := c.Len()
		require.LessOrEqual(t, n, limit)
	}
	n, dropped, visited := c.Len()
	t.Logf("%d keys, %d dropped, %d visited for %d added", n, dropped, visited, flood)
	require.Zero(t, dropped, "idle keys make room")
	require.LessOrEqual(t, visited, uint64(4*flood), "upkeep is O(1) a key, amortised")
	d := c.Admit("busy", t0.Add(flood*10*time.Microsecond), cfg, 0)
	require.Greater(t, d.Requests, 1.0, "the busy key kept its counts")

	// Keys that all stay busy: over the cap, the least busy go.
	cfg.Window = time.Hour
	var busy Counts
	for i := range 10 * limit {
		busy.Record(strconv.Itoa(i), Failed, t0, cfg)
		n, _, _ := busy.Len()
		require.LessOrEqual(t, n, limit)
	}
	n, dropped, visited = busy.Len()
	t.Logf("all busy: %d keys, %d dropped, %d visited for %d added", n, dropped, visited, 10*limit)
	require.Equal(t, uint64(10*limit-n), dropped)
	require.LessOrEqual(t, visited, uint64(40*10*limit), "upkeep is O(1) a key, amortised")
}
