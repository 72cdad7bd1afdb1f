package limitertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/keylimit/keylimit/quota"
)

// matrixFull runs the whole matrix: every size, more rounds, the calendar's
// changes of clock. KEYLIMIT_MATRIX=full does the same.
var matrixFull = flag.Bool("matrix.full", false, "limitertest: run the whole composition matrix (RunMatrix), not its short form")

// RunMatrix runs every composition of limiters (All of two and of three,
// keys under limits of their own, Penalty, quota's charge by outcome,
// calendar periods, concurrency alone and beside a rate, an in-process
// adaptive.Limiter beside the store's rate, leases, and the
// store's failures) over each store, a Harness with the fields of a store
// (Name, Now, Advance, Limiter, and the features it has), one subtest a cell,
// store/composition/q=quota. A cell plays rounds of 64 goroutines on its
// key while the clock moves, and checks after each round that exactly what
// the bound allows was admitted, and Remaining.
//
// Its short form runs one quota and three rounds a cell; -matrix.full (or
// KEYLIMIT_MATRIX=full in the environment, or a -full flag of the test
// binary's own set) runs four quotas, eight rounds, and the calendar
// periods across changes of clock too. The stores run in parallel.
func RunMatrix(t *testing.T, stores ...Harness) {
	full := *matrixFull || os.Getenv("KEYLIMIT_MATRIX") == "full"
	if f := flag.Lookup("full"); f != nil && f.Value.String() == "true" {
		full = true // the test binary's own -full, the root module's large-scale flag
	}
	sizes, rounds := []int{25}, 3
	if full {
		sizes, rounds = []int{1, 5, 40, 250}, 8
	}
	for _, s := range stores {
		if s.Now == nil || s.Advance == nil || s.Limiter == nil {
			t.Fatalf("limitertest: store %q lacks Now, Advance or Limiter", s.Name)
		}
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel() // the stores share nothing: not a clock, not a key
			for _, comp := range compositions(full) {
				if comp.needs != nil && !comp.needs(s) {
					t.Logf("%s: not a feature of this store", comp.name)
					continue
				}
				qs := sizes
				if comp.once {
					qs = sizes[len(sizes)-1:]
				}
				for _, q := range qs {
					t.Run(fmt.Sprintf("%s/q=%d", comp.name, q), func(t *testing.T) {
						runCell(t, s, comp, q, rounds)
					})
				}
			}
		})
	}
}

// composition is a column of the matrix.
type composition struct {
	name  string
	needs func(Harness) bool // nil: every store has what it needs
	once  bool               // its quota does not matter: run with one
	run   func(c *cell)
}

var kinds = []string{"bucket", "fixed", "sliding"}

func compositions(full bool) []composition {
	var cs []composition
	for _, k := range kinds {
		cs = append(cs, composition{name: k, run: func(c *cell) { c.single(k) }})
	}
	cs = append(cs,
		composition{name: "All/2", run: (*cell).all2},
		composition{name: "All/3", run: (*cell).all3})
	for _, k := range kinds {
		cs = append(cs, composition{name: "tiers/" + k, run: func(c *cell) { c.tiers(k) }})
	}
	cs = append(cs,
		composition{name: "Penalty", needs: func(s Harness) bool { return s.Penalty != nil }, run: (*cell).penalty},
		composition{name: "charge", run: (*cell).charge})
	starts := []string{"newyear"}
	if full {
		starts = append(starts, "spring", "fall")
	}
	for _, cal := range []keylimit.Calendar{keylimit.Hourly, keylimit.Daily, keylimit.Weekly, keylimit.Monthly} {
		for _, start := range starts {
			cs = append(cs, composition{name: fmt.Sprintf("calendar/%v/%s", cal, start), run: func(c *cell) { c.calendar(cal, start) }})
		}
	}
	conc := func(s Harness) bool { return s.Concurrency != nil }
	cs = append(cs,
		composition{name: "concurrency", needs: conc, run: (*cell).concurrency},
		composition{name: "concurrency+rate", needs: conc, run: (*cell).concurrencyAndRate},
		composition{name: "adaptive+rate", run: (*cell).adaptiveAndRate})
	for _, k := range []string{"bucket", "fixed"} {
		cs = append(cs, composition{name: "leases/" + k, needs: func(s Harness) bool { return s.Leased != nil },
			run: func(c *cell) { c.leases(k) }})
	}
	for _, f := range []string{"timeout", "script error"} {
		cs = append(cs, composition{name: "faults/" + strings.ReplaceAll(f, " ", "-"), once: true,
			needs: func(s Harness) bool { return s.Faults != nil }, run: func(c *cell) { c.faults(f) }})
	}
	return cs
}

// cell is one cell of the matrix as it runs: a composition on a store,
// under quota q.
type cell struct {
	t      *testing.T
	s      Harness
	q      int
	rounds int
	round  int      // the round under way, for the messages
	failed []string // what failed, in order
}

// cellFailed is the panic of a check that failed; runCell recovers it.
type cellFailed struct{}

func runCell(t *testing.T, s Harness, comp composition, q, rounds int) {
	c := &cell{t: t, s: s, q: q, rounds: rounds}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(cellFailed); !ok {
					panic(r)
				}
			}
		}()
		comp.run(c)
	}()
	if len(c.failed) > 0 {
		t.Error(strings.Join(c.failed, "\n"))
	}
}

// fatalf records a failure and ends the cell.
func (c *cell) fatalf(format string, args ...any) {
	c.failed = append(c.failed, fmt.Sprintf("round %d: ", c.round)+fmt.Sprintf(format, args...))
	panic(cellFailed{})
}

func (c *cell) equal(what string, got, want int) {
	if got != want {
		c.fatalf("%s = %d, want %d", what, got, want)
	}
}

func (c *cell) must(err error, what string) {
	if err != nil {
		c.fatalf("%s: %v", what, err)
	}
}

// closeLater closes v when the test ends if it is an io.Closer.
func (c *cell) closeLater(v any) {
	if cl, ok := v.(io.Closer); ok {
		c.t.Cleanup(func() {
			if err := cl.Close(); err != nil {
				c.t.Errorf("Close: %v", err)
			}
		})
	}
}

func (c *cell) limiter(kind string, l keylimit.Limit, perKey func(string) keylimit.Limit) keylimit.Limiter[string] {
	lim, err := c.s.Limiter(c.t, kind, l, perKey)
	c.must(err, fmt.Sprintf("a %s of %v", kind, l))
	c.closeLater(lim)
	return lim
}

// period is the Period of every limit of the matrix but the calendar's:
// short, because a mock clock's Add sleeps a millisecond for each tick of
// each ticker on it it passes (evictors, a Redis Concurrency's renewals).
const period = time.Minute

// per returns n events per period.
func per(n int) keylimit.Limit { return keylimit.Per(n, period) }

// goroutines race on a cell's keys in every round.
const goroutines = 64

// seq makes the matrix's keys unique in the process, so that limiters
// that share a store (Redis) never see another cell's state.
var seq atomic.Int64

func (c *cell) key(name string) string {
	return fmt.Sprintf("%s/%s/%d", name, c.t.Name(), seq.Add(1))
}

// demand is what round r asks of a bound: twice the bound and more (every
// goroutine at least once) on even rounds, half of it on odd ones (all of
// it if that is nothing).
func demand(r, bound, share int) int {
	if r%2 == 1 && bound >= 2 {
		return bound / 2
	}
	return 2*bound + share
}

// spread divides total attempts among n goroutines.
func spread(total, n int) []int {
	a := make([]int, n)
	for i := range a {
		a[i] = total / n
		if i < total%n {
			a[i]++
		}
	}
	return a
}

// race runs the 64 goroutines of a round, in groups: goroutine g calls
// try(g%groups) attempts[g%groups][g/groups] times, all from one start,
// while the clock moves forward by move in 4 steps. It returns what each
// group admitted.
func (c *cell) race(groups int, attempts [][]int, move time.Duration, try func(group int) bool) []int {
	admitted := make([]atomic.Int64, groups)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		n := attempts[g%groups][g/groups]
		wg.Go(func() {
			<-start
			for range n {
				if try(g % groups) {
					admitted[g%groups].Add(1)
				}
			}
		})
	}
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for range 4 {
			c.s.Advance(move / 4)
		}
	}()
	close(start)
	wg.Wait()
	<-moved
	out := make([]int, groups)
	for i := range out {
		out[i] = int(admitted[i].Load())
	}
	return out
}

// toWindow moves the clock to offset into the window of l that follows
// windows-1 others after the one that holds now.
func (c *cell) toWindow(l keylimit.Limit, windows int, offset time.Duration) {
	now := c.s.Now()
	_, end := l.WindowAt(now)
	for range windows - 1 {
		_, end = l.WindowAt(end)
	}
	c.s.Advance(end.Add(offset).Sub(now))
}

// target is a key a round races on, in the limiter that decides it.
type target struct {
	lim   keylimit.Limiter[string]
	key   string
	bound int    // the most a round admits
	parts []part // limiters inside lim, to check too
	// retryMax is the most a refusal's RetryAfter may be.
	retryMax time.Duration
}

// part is a limiter inside a composition, and its quota: after a round that
// admitted a, its Remaining is quota - a, whatever the others refused.
type part struct {
	lim   keylimit.Limiter[string]
	quota int
}

// rates plays the cell's rounds on targets, each at the start of a window
// of l, one window apart, so that nothing of a round counts in the next: a
// bucket is full again, a sliding window empty. want is rateRound's.
func (c *cell) rates(l keylimit.Limit, want func(r, bound, admitted, demand int) (int, int), targets ...target) {
	for r := range c.rounds {
		c.round = r
		c.toWindow(l, 2, l.Period/16)
		c.rateRound(r, l.Period/time.Duration(8*c.q), want, targets...)
	}
}

// rateRound plays round r on targets (64 goroutines shared among them),
// with the clock moving by move, and checks each target's admissions and
// Remaining: want returns them for a bound, what was admitted and what was
// asked (nil: all that was asked, up to the bound, and what that leaves).
func (c *cell) rateRound(r int, move time.Duration, want func(r, bound, admitted, demand int) (int, int), targets ...target) {
	share := goroutines / len(targets)
	attempts := make([][]int, len(targets))
	asked := make([]int, len(targets))
	for i, tg := range targets {
		asked[i] = demand(r, tg.bound, share)
		attempts[i] = spread(asked[i], share)
	}
	var badRetry atomic.Pointer[string]
	got := c.race(len(targets), attempts, move, func(i int) bool {
		tg := targets[i]
		res := tg.lim.Take(tg.key, 1)
		// A call the clock moved under may say its RetryAfter as of its
		// start: up to move more.
		if most := tg.retryMax + move; !res.Allowed && (res.RetryAfter <= 0 || res.RetryAfter > most) {
			msg := fmt.Sprintf("a refusal of %s: RetryAfter %v is not in (0, %v]: %+v", tg.key, res.RetryAfter, most, res)
			badRetry.CompareAndSwap(nil, &msg)
		}
		return res.Allowed
	})
	for i, tg := range targets {
		wantAdmitted, wantLeft := min(asked[i], tg.bound), tg.bound-min(asked[i], tg.bound)
		if want != nil {
			wantAdmitted, wantLeft = want(r, tg.bound, got[i], asked[i])
		}
		c.equal(fmt.Sprintf("admitted on %s of %d asked", tg.key, asked[i]), got[i], wantAdmitted)
		c.equal(fmt.Sprintf("Peek(%s).Remaining", tg.key), tg.lim.Peek(tg.key).Remaining, wantLeft)
		for j, p := range tg.parts {
			c.equal(fmt.Sprintf("part %d of %s: Peek.Remaining", j, tg.key), p.lim.Peek(tg.key).Remaining, p.quota-got[i])
		}
	}
	if m := badRetry.Load(); m != nil {
		c.fatalf("%s", *m)
	}
}

func (c *cell) single(kind string) {
	l := per(c.q)
	c.rates(l, nil, target{lim: c.limiter(kind, l, nil), key: c.key("k"), bound: c.q, retryMax: period})
}

// all2 is All(bucket of 2q, fixed window of q): the window refuses what
// the bucket admitted, and All gives the bucket back exactly that.
func (c *cell) all2() {
	b, w := c.limiter("bucket", per(2*c.q), nil), c.limiter("fixed", per(c.q), nil)
	c.rates(per(c.q), nil, target{lim: keylimit.All(b, w), key: c.key("k"), bound: c.q, retryMax: period,
		parts: []part{{b, 2 * c.q}, {w, c.q}}})
}

// all3 is All(sliding window of 3q, bucket of 2q, fixed window of q).
func (c *cell) all3() {
	s, b, w := c.limiter("sliding", per(3*c.q), nil), c.limiter("bucket", per(2*c.q), nil), c.limiter("fixed", per(c.q), nil)
	c.rates(per(c.q), nil, target{lim: keylimit.All(s, b, w), key: c.key("k"), bound: c.q, retryMax: period,
		parts: []part{{s, 3 * c.q}, {b, 2 * c.q}, {w, c.q}}})
}

// tiers: a gold key under a limit of its own, 2q, and a free one under the
// limiter's, q, raced at once.
func (c *cell) tiers(kind string) {
	gold := func(key string) keylimit.Limit {
		if strings.HasPrefix(key, "gold/") {
			return per(2 * c.q)
		}
		return per(c.q)
	}
	lim := c.limiter(kind, per(c.q), gold)
	c.rates(per(c.q), nil,
		target{lim: lim, key: c.key("gold"), bound: 2 * c.q, retryMax: period},
		target{lim: lim, key: c.key("free"), bound: c.q, retryMax: period})
}

// penalty: a fixed window of q under a Penalty that bans for 2.5 periods
// at the second refusal within one. A round that asks more than q admits q
// and bans the key: the next round, two periods later, is banned and
// admits nothing (its refusals start no ban: the limiter is not asked);
// the one after, two more on, is free again. Free rounds ask more than q
// and half of q in turn.
func (c *cell) penalty() {
	l := per(c.q)
	b := keylimit.Ban{Refusals: 2, Within: period, For: 5 * period / 2}
	p, err := c.s.Penalty(c.t, c.limiter("fixed", l, nil), b)
	c.must(err, "Penalty")
	c.closeLater(p)
	key := c.key("k")
	banned, free := false, 0
	for r := range c.rounds {
		c.round = r
		c.toWindow(l, 2, period/16)
		asks := 0 // demand's round: even asks more than q
		if !banned {
			asks = free
			free++
		}
		c.rateRound(asks, period/time.Duration(8*c.q), func(_, bound, _, asked int) (int, int) {
			switch {
			case banned:
				return 0, 0
			case asked >= bound+b.Refusals:
				return bound, 0
			}
			return asked, bound - asked
		}, target{lim: p, key: key, bound: c.q, retryMax: b.For})
		banned = !banned && demand(asks, c.q, goroutines) >= c.q+b.Refusals
	}
}

// charge: quota's charge by outcome, of a fixed window of q: a request
// whose outcome is 401 is charged, a 200 is given back. Even rounds are
// all 401s: exactly q pass. Odd rounds mix them: what is charged is at most
// q, Remaining is q less it, and exactly that much is left to take.
func (c *cell) charge() {
	l := per(c.q)
	lim := c.limiter("fixed", l, nil)
	d, err := quota.New(quota.Config{Policies: []quota.Policy{{Name: "failures", Limiter: lim, Window: period,
		Charge: func(o quota.Outcome) int {
			if o.Status == 401 {
				return o.Cost
			}
			return 0
		}}}})
	c.must(err, "quota.New")
	for r := range c.rounds {
		c.round = r
		c.toWindow(l, 2, period/16)
		key := c.key("k")
		mixed := r%2 == 1
		var charged, errs atomic.Int64
		c.race(1, [][]int{spread(2*c.q+goroutines, goroutines)}, period/time.Duration(8*c.q), func(int) bool {
			v, err := d.Decide(context.Background(), key, "", 1)
			if err != nil || v.Action() == quota.Fail {
				errs.Add(1)
				return false
			}
			if v.Action() != quota.Proceed {
				return false
			}
			status := 401
			if mixed && seq.Add(1)%2 == 0 {
				status = 200
			}
			v.FinishWith(quota.Outcome{Status: status, Cost: 1, Reported: -1})
			if status == 401 {
				charged.Add(1)
			}
			return true
		})
		c.equal("decisions that failed", int(errs.Load()), 0)
		n := int(charged.Load())
		if !mixed {
			c.equal("requests charged", n, c.q)
		} else if n > c.q {
			c.fatalf("requests charged = %d, above the quota %d", n, c.q)
		}
		c.equal("Peek().Remaining", lim.Peek(key).Remaining, c.q-n)
		fill := 0
		for ; lim.Allow(key); fill++ {
			if fill > c.q {
				c.fatalf("more than the quota %d admitted after %d charged", c.q, n)
			}
		}
		c.equal(fmt.Sprintf("admitted after the round, %d charged", n), fill, c.q-n)
	}
}

// newYork is where the calendar cells count: a zone that changes its clock.
func newYork(c *cell) *time.Location {
	loc, err := time.LoadLocation("America/New_York")
	c.must(err, "the zone of the calendar cells")
	return loc
}

// calendar: a fixed window of q per calendar period in New York, whose
// rounds, one a period, cross a new year there (start "newyear"), or the
// change to summer time ("spring") or from it ("fall").
func (c *cell) calendar(cal keylimit.Calendar, start string) {
	ny := newYork(c)
	l := keylimit.PerCalendar(c.q, cal, ny)
	lim := c.limiter("fixed", l, nil)
	y := c.s.Now().In(ny).Year() + 1
	var change time.Time
	switch start {
	case "newyear":
		change = time.Date(y, 1, 1, 0, 0, 0, 0, ny)
	case "spring": // the second Sunday of March, 02:00 EST, is 03:00 EDT
		change = time.Date(y, 3, 8+(7-int(time.Date(y, 3, 8, 0, 0, 0, 0, ny).Weekday()))%7, 0, 0, 0, 0, ny).Add(2 * time.Hour)
	case "fall": // the first Sunday of November, 02:00 EDT, is 01:00 EST
		change = time.Date(y, 11, 1+(7-int(time.Date(y, 11, 1, 0, 0, 0, 0, ny).Weekday()))%7, 0, 0, 0, 0, ny).Add(2 * time.Hour)
	}
	// The first round is in the period before the one the change falls in.
	first, _ := l.WindowAt(change)
	first, _ = l.WindowAt(first.Add(-time.Nanosecond))
	c.s.Advance(first.Add(time.Minute).Sub(c.s.Now()))
	key := c.key("k")
	for r := range c.rounds {
		c.round = r
		if r > 0 {
			c.toWindow(l, 1, time.Minute)
		}
		ws, we := l.WindowAt(c.s.Now())
		c.rateRound(r, time.Second, nil, target{lim: lim, key: key, bound: c.q, retryMax: we.Sub(ws)})
	}
}

// concurrency: the goroutines acquire one slot of q at a time and hold
// them to the end of the round: exactly what was asked, up to q, is held;
// then every permit is released twice at once, once by a copy, and all
// q are free.
func (c *cell) concurrency() {
	lim, err := c.s.Concurrency(c.t, c.q, 0)
	c.must(err, "Concurrency")
	c.closeLater(lim)
	key := c.key("k")
	for r := range c.rounds {
		c.round = r
		c.s.Advance(period)
		asked := demand(r, c.q, goroutines)
		var mu sync.Mutex
		var held []keylimit.Permit
		// The clock moves less than a Redis Concurrency's hold expiry
		// (redislimit.DefaultHoldExpiry): the holds of an instance that
		// has not renewed them in it are taken for a dead instance's.
		got := c.race(1, [][]int{spread(asked, goroutines)}, time.Second, func(int) bool {
			p, res := lim.TryAcquire(key, 1)
			if res.Allowed {
				mu.Lock()
				held = append(held, p)
				mu.Unlock()
			}
			return res.Allowed
		})
		c.equal(fmt.Sprintf("slots held of %d asked", asked), got[0], min(asked, c.q))
		c.equal("Peek().Remaining with the slots held", lim.Peek(key).Remaining, c.q-got[0])
		var wg sync.WaitGroup
		for _, p := range held {
			again := p
			wg.Go(p.Release)
			wg.Go(again.Release)
		}
		wg.Wait()
		c.equal("Peek().Remaining once all are released", lim.Peek(key).Remaining, c.q)
	}
}

// concurrencyAndRate: a quota tier of a rate of 2q a period and q
// requests in flight, whose requests are held to the end of the round: the
// slots bind, and a request refused for want of one takes nothing from the
// rate.
func (c *cell) concurrencyAndRate() {
	slots, err := c.s.Concurrency(c.t, c.q, 0)
	c.must(err, "Concurrency")
	c.closeLater(slots)
	c.slotsAndRate(func() keylimit.ConcurrencyLimiter[string] { return slots })
}

// adaptiveAndRate is concurrencyAndRate with an in-process adaptive.Limiter
// as the tier's concurrency policy, beside the store's rate: its floor and
// ceiling both q, so that one key may hold exactly q (a lone key's fair
// share is the whole limit, and it has no band above it). A new one each
// round: a slot the last round's key released a moment ago is kept for it
// (see adaptive.Limiter), which would hold this round's key to less.
func (c *cell) adaptiveAndRate() {
	c.slotsAndRate(func() keylimit.ConcurrencyLimiter[string] {
		slots, err := adaptive.New[string](adaptive.AIMD(c.q, c.q))
		c.must(err, "adaptive.New")
		c.closeLater(slots)
		return slots
	})
}

// slotsAndRate runs concurrencyAndRate's rounds with the concurrency
// policy newSlots returns for each round.
func (c *cell) slotsAndRate(newSlots func() keylimit.ConcurrencyLimiter[string]) {
	l := per(2 * c.q)
	rate := c.limiter("fixed", l, nil)
	for r := range c.rounds {
		c.round = r
		slots := newSlots()
		d, err := quota.New(quota.Config{Policies: []quota.Policy{
			{Name: "rate", Limiter: rate, Window: period}, {Name: "inflight", Concurrency: slots}}})
		c.must(err, "quota.New")
		c.toWindow(l, 2, period/16)
		key := c.key("k")
		asked := demand(r, c.q, goroutines)
		var mu sync.Mutex
		var held []quota.Verdict
		var errs atomic.Int64
		got := c.race(1, [][]int{spread(asked, goroutines)}, time.Second, func(int) bool { // as in concurrency
			v, err := d.Decide(context.Background(), key, "", 1)
			if err != nil || v.Action() == quota.Fail {
				errs.Add(1)
				return false
			}
			mu.Lock()
			held = append(held, v)
			mu.Unlock()
			return v.Action() == quota.Proceed
		})
		c.equal("decisions that failed", int(errs.Load()), 0)
		c.equal(fmt.Sprintf("requests in flight of %d asked", asked), got[0], min(asked, c.q))
		c.equal("the slots' Peek().Remaining", slots.Peek(key).Remaining, c.q-got[0])
		c.equal("the rate's Peek().Remaining", rate.Peek(key).Remaining, 2*c.q-got[0])
		for i := range held {
			held[i].Finish()
		}
		c.equal("the slots' Peek().Remaining once all finished", slots.Peek(key).Remaining, c.q)
		c.equal("the rate's Peek().Remaining once all finished", rate.Peek(key).Remaining, 2*c.q-got[0])
	}
}

// leases: two instances of a limiter of q that take their events in
// leases, raced on one key, and a third of the same counts that takes
// none. The fleet admits at most what was asked, up to q: by design a
// leased instance may refuse while Redis holds events (a lease idle on the
// other instance, a call that waited for three fetches of others, the wait
// after a short fetch; see redislimit's package doc, "Leases"). Once the
// two are closed, which gives their leases back, the third sees what is
// left: for a window, exactly q less what the fleet admitted (for a
// bucket, at most that: it takes back only what it would not have refilled
// within a lease time), and admits exactly what it sees.
func (c *cell) leases(kind string) {
	l := per(c.q)
	for r := range c.rounds {
		c.round = r
		c.toWindow(l, 2, period/16)
		fleet, err := c.s.Leased(c.t, kind, l, 3)
		c.must(err, "Leased")
		c.closeLater(fleet[2])
		key := c.key("k")
		asked := demand(r, c.q, goroutines)
		attempts := make([][]int, 2)
		for i, n := range spread(asked, 2) {
			attempts[i] = spread(n, goroutines/2)
		}
		got := c.race(2, attempts, period/time.Duration(8*c.q), func(i int) bool { return fleet[i].Allow(key) })
		total := got[0] + got[1]
		if total > min(asked, c.q) {
			c.fatalf("admitted by the fleet (%d, %d) of %d asked = %d, above %d", got[0], got[1], asked, total, min(asked, c.q))
		}
		for _, lim := range fleet[:2] {
			c.must(lim.(io.Closer).Close(), "Close")
		}
		left := fleet[2].Peek(key).Remaining
		what := fmt.Sprintf("Peek().Remaining of the instance without leases, the fleet having admitted (%d, %d)", got[0], got[1])
		if kind != "bucket" {
			c.equal(what, left, c.q-total)
		} else if left > c.q-total {
			c.fatalf("%s = %d, above %d", what, left, c.q-total)
		}
		fill := 0
		for ; fleet[2].Allow(key); fill++ {
			if fill > c.q {
				c.fatalf("the instance without leases admits without end")
			}
		}
		c.equal("admitted by the instance without leases", fill, left)
	}
}

// faults: a call that fails by fault is refused (the store fails closed)
// and returns an error. A script error is the store's answer about one
// call, not an outage: the next call asks the store again, and is decided
// by the limit. A timeout may be an outage: within the failure backoff the
// next call is answered without asking, and after it by the limit. A round
// raced while every call fails admits nothing, and the next, exactly q.
func (c *cell) faults(fault string) {
	l := per(c.q)
	lim, inject, err := c.s.Faults(c.t, l)
	c.must(err, "Faults")
	c.closeLater(lim)
	ctx := context.Background()
	c.toWindow(l, 2, period/16)
	inject(fault)
	r, err := lim.TakeContext(ctx, c.key("failed"), 1)
	if err == nil || r.Allowed {
		c.fatalf("a call failing by %s = %+v, %v: want refused, and an error", fault, r, err)
	}
	if timeout := errors.Is(err, context.DeadlineExceeded); timeout != (fault == "timeout") {
		c.fatalf("a call failing by %s: error %v, a deadline exceeded: %v", fault, err, timeout)
	}
	inject("")
	r, err = lim.TakeContext(ctx, c.key("next"), 1)
	if fault == "timeout" {
		if err == nil {
			c.fatalf("the call after a timeout, within the failure backoff, = %+v with no error: want answered without asking", r)
		}
		c.s.Advance(period)
		r, err = lim.TakeContext(ctx, c.key("next"), 1)
	}
	if err != nil || !r.Allowed || r.Remaining != c.q-1 {
		c.fatalf("the call after a %s on another key = %+v, %v: want decided by the limit, Remaining %d", fault, r, err, c.q-1)
	}
	c.round = 1
	c.toWindow(l, 2, period/16)
	inject(fault)
	key := c.key("k")
	got := c.race(1, [][]int{spread(2*c.q+goroutines, goroutines)}, 0, func(int) bool { return lim.Allow(key) })
	c.equal(fmt.Sprintf("admitted while every call fails by %s", fault), got[0], 0)
	inject("")
	c.s.Advance(period)
	c.round = 2
	c.toWindow(l, 2, period/16)
	c.rateRound(0, period/time.Duration(8*c.q), nil, target{lim: lim, key: key, bound: c.q, retryMax: period})
}
