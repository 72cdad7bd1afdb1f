package keylimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

func TestAllRefusedTakesNothing(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(10), keylimit.PerHour(2))
	lim := keylimit.All[string](bs[0], bs[1])

	require.True(t, lim.Allow("k"))
	r := lim.Take("k", 1)
	require.True(t, r.Allowed)
	require.Equal(t, 0, r.Remaining, "the tighter limit binds")
	require.Equal(t, 2, r.Limit, "and brings its Limit")

	// The hour-of-10 takes first, then the hour-of-2 refuses: the first
	// gives its token back.
	r = lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 2, r.Limit, "the limiter that refused decides")
	require.Equal(t, 0, r.Remaining)
	require.Equal(t, bs[1].Peek("k").RetryAfter, r.RetryAfter)
	require.Equal(t, 8, bs[0].Peek("k").Remaining, "the refused call took nothing from the looser limit")

	// n above one limit's quota can never pass, and takes nothing anywhere.
	r = lim.Take("other", 3)
	require.False(t, r.Allowed)
	require.Equal(t, keylimit.InfDuration, r.RetryAfter)
	require.Equal(t, 10, bs[0].Peek("other").Remaining)
}

func TestAllFirstRefusesSecondUntouched(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerSecond(1).WithBurst(3), keylimit.PerMinute(5))
	lim := keylimit.All[string](bs[0], bs[1])
	for range 3 {
		require.True(t, lim.Allow("k"))
	}
	r := lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 3, r.Limit)
	require.Equal(t, 2, bs[1].Peek("k").Remaining, "the second limiter was not asked")
	require.Equal(t, 0, r.Remaining)
	require.Equal(t, bs[0].Peek("k").RetryAfter, r.RetryAfter)
	require.Equal(t, bs[1].Peek("k").ResetAfter, r.ResetAfter, "the largest ResetAfter")

	p := lim.Peek("k")
	require.Equal(t, bs[0].Peek("k").RefillAfter, r.RefillAfter, "the RefillAfter of the lesser Remaining")
	require.Equal(t, keylimit.Result{Limit: 3, Remaining: 0, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, RefillAfter: r.RefillAfter}, p)

	clk.Add(s)
	p = lim.Peek("k")
	require.True(t, p.Allowed)
	require.Equal(t, 1, p.Remaining)
	require.Equal(t, 3, p.Limit, "the bucket with 1 left binds")
}

// TestAllExactUnderContention: many goroutines through All on a frozen
// clock, one limiter of each type, admit exactly the tightest quota, each
// type in turn the tightest; every limiter before the tightest gives back
// what it took for the calls the tightest refused, and every limiter ends
// charged exactly what was admitted.
func TestAllExactUnderContention(t *testing.T) {
	const tight = 5_000
	loose := map[*kind]int{tokenBucket: 20_000, fixedWindow: 40_000, slidingWindow: keylimit.MaxSlidingWindowEvents, slidingCounter: 30_000}
	for _, tightest := range kinds {
		t.Run(tightest.name, func(t *testing.T) {
			// The tightest third: the two before it give back, the one after
			// it is asked only when the tightest admits.
			var order []*kind
			for _, k := range kinds {
				if k != tightest {
					order = append(order, k)
				}
			}
			order = append(order[:2:2], tightest, order[2])
			clk := newFastClock()
			var limiters []keylimit.Limiter[string]
			for _, k := range order {
				quota := loose[k]
				if k == tightest {
					quota = tight
				}
				limiters = append(limiters, k.on(t, clk, keylimit.PerHour(quota)))
			}
			lim := keylimit.All(limiters...)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 500 {
						if lim.Allow("hot") {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.EqualValues(t, tight, admitted.Load())
			for i, k := range order {
				quota := loose[k]
				if k == tightest {
					quota = tight
				}
				require.Equal(t, quota-tight, limiters[i].Peek("hot").Remaining, "%s is charged what was admitted", k.name)
			}
		})
	}
}

func TestAllOrderDoesNotChangeDecisions(t *testing.T) {
	clk := newFastClock()
	a := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerSecond(2).WithBurst(4), keylimit.PerMinute(9))
	b := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerMinute(9), keylimit.PerSecond(2).WithBurst(4))
	ab, ba := keylimit.All[string](a[0], a[1]), keylimit.All[string](b[0], b[1])
	for i := range 200 {
		n := i%3 + 1
		ra, rb := ab.Take("k", n), ba.Take("k", n)
		require.Equal(t, ra.Allowed, rb.Allowed, "call %d", i)
		require.Equal(t, ra.Remaining, rb.Remaining, "call %d", i)
		clk.Add(170 * ms)
	}
}

func TestAllResetAndRefund(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(4), keylimit.PerHour(3))
	lim := keylimit.All[string](bs[0], bs[1])
	r, a := lim.(keylimit.Refunder[string]).Admit("k", 3)
	require.True(t, r.Allowed)
	require.Equal(t, 1, bs[0].Peek("k").Remaining)
	require.Equal(t, 0, bs[1].Peek("k").Remaining)
	lim.(keylimit.Refunder[string]).Refund("k", a)
	require.Equal(t, 4, bs[0].Peek("k").Remaining)
	require.Equal(t, 3, bs[1].Peek("k").Remaining)
	require.True(t, lim.AllowN("k", 2))
	lim.Reset("k")
	require.Equal(t, 4, bs[0].Peek("k").Remaining)
	require.Equal(t, 3, bs[1].Peek("k").Remaining)
}

// notRefunder is a Limiter without Refund.
type notRefunder struct{ keylimit.Limiter[string] }

func TestAllPanicsOnProgrammingErrors(t *testing.T) {
	b := bucketsOn(t, keylimit.WithClock(newFastClock()), keylimit.PerHour(1))[0]
	require.PanicsWithValue(t, "keylimit: All needs at least one limiter", func() { keylimit.All[string]() })
	require.PanicsWithValue(t, "keylimit: All: limiter 1 is nil", func() { keylimit.All[string](b, nil) })
	require.Panics(t, func() { keylimit.All[string](notRefunder{b}, b) })
	require.NotPanics(t, func() { keylimit.All[string](b, notRefunder{b}) }, "the last limiter needs no Refund")
}

// TestAllAllocs: All's Allow allocates nothing, though it admits from each
// limiter but the last with an Admission: of each type, and of a Penalty
// around one. (A handed-out Admission allocates its once; All's own parts
// need none.)
func TestAllAllocs(t *testing.T) {
	clk := newFastClock()
	last := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerSecond(2_000_000))[0]
	for _, k := range kinds {
		first := k.on(t, clk, keylimit.PerHour(keylimit.MaxSlidingWindowEvents))
		p, err := keylimit.NewPenalty[string](k.on(t, clk, keylimit.PerHour(keylimit.MaxSlidingWindowEvents)),
			keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		for name, lim := range map[string]keylimit.Limiter[string]{
			k.name: keylimit.All[string](first, last), "Penalty(" + k.name + ")": keylimit.All[string](p, last),
		} {
			lim.Allow("k")
			require.Zero(t, testing.AllocsPerRun(1000, func() { lim.Allow("k") }), name)
		}
	}
}

// TestAllMinuteAndHour is the case of 10 a minute and 500 an hour on one
// key, with a FixedWindow for the minute and, for the hour, a SlidingWindow
// or a FixedWindow, on a mock clock: 10 pass, the 11th is refused until the
// minute's end; after 50 minutes of 10 a minute, the 501st of the hour is
// refused though the minute would allow it. No refused call is charged to
// either limit.
func TestAllMinuteAndHour(t *testing.T) {
	for _, hour := range []struct {
		kind *kind
		// retry is the RetryAfter of the 501st request, at 50:15, when the
		// first 10 came at 0:15.
		retry time.Duration
	}{
		{slidingWindow, 10 * time.Minute},
		{fixedWindow, 9*time.Minute + 45*s},
	} {
		t.Run(hour.kind.name, func(t *testing.T) {
			minute, mock := fixedWindow.mock(t, keylimit.PerMinute(10)) // on an hour boundary
			hourly := hour.kind.make(t, keylimit.PerHour(500), keylimit.WithClock(mock))
			lim := keylimit.All[string](minute, hourly)
			t0 := mock.Now()

			mock.Set(t0.Add(15 * s))
			for i := range 10 {
				require.True(t, lim.Allow("k"), "request %d", i+1)
			}
			r := lim.Take("k", 1)
			require.False(t, r.Allowed)
			require.Equal(t, 10, r.Limit, "the minute refused")
			require.Equal(t, 45*s, r.RetryAfter, "until the minute's end")
			require.Equal(t, 490, hourly.Peek("k").Remaining, "the refused call took nothing from the hour")
			require.Equal(t, 0, minute.Peek("k").Remaining)

			// 49 more minutes of 10 a minute, each 11th refused.
			for m := 1; m < 50; m++ {
				mock.Set(t0.Add(time.Duration(m)*time.Minute + 15*s))
				require.True(t, lim.AllowN("k", 10), "minute %d", m)
				require.Equal(t, 10, lim.Take("k", 1).Limit, "minute %d: the minute refused", m)
			}
			require.Equal(t, 0, hourly.Peek("k").Remaining, "500 in the hour")

			mock.Set(t0.Add(50*time.Minute + 15*s))
			require.True(t, minute.Peek("k").Allowed, "the minute would allow it")
			r = lim.Take("k", 1)
			require.False(t, r.Allowed, "the 501st in the hour")
			require.Equal(t, 500, r.Limit, "the hour refused")
			require.Equal(t, hour.retry, r.RetryAfter)
			require.Equal(t, 10, minute.Peek("k").Remaining, "the minute gave back what it took")
			for range 5 {
				require.False(t, lim.Allow("k"))
			}
			require.Equal(t, 10, minute.Peek("k").Remaining, "refused calls are never charged")

			mock.Add(r.RetryAfter - 1)
			require.False(t, lim.Allow("k"), "1 ns before RetryAfter")
			mock.Add(1)
			require.True(t, lim.AllowN("k", 10), "at RetryAfter")
		})
	}
}

// TestAllRefundsAcrossMoves: many goroutines through All on a frozen
// clock, the window first, a tighter bucket second, so that the window
// gives back what the bucket refuses, while other goroutines move the
// window's key to new limits. The window ends charged with exactly what was
// admitted: no refund is lost to a move, none counted twice.
func TestAllRefundsAcrossMoves(t *testing.T) {
	for _, k := range windowKinds {
		t.Run(k.name, func(t *testing.T) {
			clk := newFastClock()
			loose := keylimit.PerHour(keylimit.MaxSlidingWindowEvents)
			window := k.on(t, clk, loose)
			tight := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(3000))[0]
			lim := keylimit.All[string](window, tight)
			var stop atomic.Bool
			var setErrs atomic.Int64
			var movers, callers sync.WaitGroup
			movers.Go(func() {
				for !stop.Load() {
					if window.SetLimit(loose) != nil {
						setErrs.Add(1)
					}
					window.Peek("hot")
				}
			})
			var admitted atomic.Int64
			for range 16 {
				callers.Go(func() {
					for range 1000 {
						if lim.Allow("hot") {
							admitted.Add(1)
						}
					}
				})
			}
			callers.Wait()
			stop.Store(true)
			movers.Wait()
			require.Zero(t, setErrs.Load(), "SetLimit errors")
			require.EqualValues(t, 3000, admitted.Load())
			require.Equal(t, loose.Events-3000, window.Peek("hot").Remaining)
		})
	}
}

// peekRecorder is a limiter whose Peek takes a context, as the redislimit
// ones do; it records the context values its PeekContext saw.
type peekRecorder struct {
	keylimit.Limiter[string]
	saw []any
}

type ctxKey struct{}

func (p *peekRecorder) PeekContext(ctx context.Context, key string) (keylimit.Result, error) {
	p.saw = append(p.saw, ctx.Value(ctxKey{}))
	return p.Peek(key), ctx.Err()
}

// TestAllPeeksUnderTheContext: when one limiter refuses, All asks the others
// what they would say under the request's context, as it takes under it;
// and All's own PeekContext does too. A limiter on a remote store so sees
// the request's deadline, cancel and trace.
func TestAllPeeksUnderTheContext(t *testing.T) {
	tight := build(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(1))
	rec := &peekRecorder{Limiter: build(t, keylimit.NewTokenBucket[string], keylimit.PerMinute(10))}
	lim := keylimit.All[string](tight, rec)
	ctx := context.WithValue(context.Background(), ctxKey{}, "request 7")
	c := lim.(keylimit.ContextLimiter[string])
	r, err := c.TakeContext(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = c.TakeContext(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, r.Allowed, "the fixed window refuses the second")
	require.Equal(t, 0, r.Remaining, "the window's 0 binds")
	require.Equal(t, []any{"request 7"}, rec.saw, "the refusal's Peek of the bucket, under the request's context")

	p, ok := lim.(interface {
		PeekContext(context.Context, string) (keylimit.Result, error)
	})
	require.True(t, ok, "All has PeekContext")
	_, err = p.PeekContext(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, []any{"request 7", "request 7"}, rec.saw)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.PeekContext(ended, "k")
	require.ErrorIs(t, err, context.Canceled, "an ended context asks none")
	require.Len(t, rec.saw, 2)
}

// remoteRecorder is a limiter whose Stats say Remote, as a remote store's
// do; it counts the calls that would be round trips.
type remoteRecorder struct {
	*keylimit.TokenBucket[string]
	calls int
}

func (r *remoteRecorder) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }

func (r *remoteRecorder) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	r.calls++
	return r.TokenBucket.Admit(key, n)
}

func (r *remoteRecorder) Take(key string, n int) keylimit.Result {
	r.calls++
	return r.TokenBucket.Take(key, n)
}

func (r *remoteRecorder) Refund(key string, a keylimit.Admission) {
	r.calls++
	r.TokenBucket.Refund(key, a)
}

func (r *remoteRecorder) Peek(key string) keylimit.Result {
	r.calls++
	return r.TokenBucket.Peek(key)
}

// TestAllPeeksNoRemoteLimiterAfterARefusalInProcess (issues 26 and 38):
// when an in-process limiter refuses, All does not ask a remote one what
// it would say (a round trip), TakeEach included; and it asks the
// in-process limiter first whatever the order given. Of 100 requests it
// refuses all but one of, the remote limiter has one call in either order
// (with the remote one given first, it was once a take and a refund per
// refusal, 199); a TakeEach refused in process, none more (it was a Peek
// each, issue 38): the remote limiter's Result is the zero Result.
func TestAllPeeksNoRemoteLimiterAfterARefusalInProcess(t *testing.T) {
	for _, remoteFirst := range []bool{false, true} {
		tight := build(t, keylimit.NewFixedWindow[string], keylimit.PerMinute(1))
		rec := &remoteRecorder{TokenBucket: build(t, keylimit.NewTokenBucket[string], keylimit.PerMinute(1000))}
		lim, remoteAt := keylimit.All[string](tight, rec), 1
		if remoteFirst {
			lim, remoteAt = keylimit.All[string](rec, tight), 0
		}
		admitted := 0
		for range 100 {
			if lim.Allow("k") {
				admitted++
			}
		}
		require.Equal(t, 1, admitted, "remoteFirst=%v: admitted of 100", remoteFirst)
		require.Equal(t, 1, rec.calls, "remoteFirst=%v: the remote limiter's calls for 100 requests", remoteFirst)
		require.Equal(t, 999, rec.TokenBucket.Peek("k").Remaining, "remoteFirst=%v: the remote limiter's Remaining", remoteFirst)
		each := make([]keylimit.Result, 2)
		_, err := lim.(interface {
			TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
		}).TakeEach(context.Background(), "k", 1, each)
		require.NoError(t, err)
		for range 99 {
			_, err := lim.(interface {
				TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
			}).TakeEach(context.Background(), "k", 1, each)
			require.NoError(t, err)
		}
		require.Equal(t, 1, rec.calls, "remoteFirst=%v: the remote limiter's calls after 100 TakeEach refused in process", remoteFirst)
		require.Equal(t, keylimit.Result{}, each[remoteAt], "remoteFirst=%v: the remote limiter's Result in TakeEach: not asked", remoteFirst)
		require.False(t, each[1-remoteAt].Allowed, "remoteFirst=%v: the in-process limiter's Result in TakeEach", remoteFirst)
		require.Equal(t, 1, each[1-remoteAt].Limit, "remoteFirst=%v: the in-process limiter's Result in TakeEach", remoteFirst)
	}
}

// logged is a TokenBucket that notes in log each call All makes of it
// (take, peek; a refund as "-name"); it has no Stats, so All cannot tell
// where it keeps its state. Its wrappers below say where.
type logged struct {
	keylimit.Limiter[string] // b's methods of a Limiter, not its Stats
	b                        *keylimit.TokenBucket[string]
	name                     string
	log                      *[]string
}

func (l *logged) Take(key string, n int) keylimit.Result {
	*l.log = append(*l.log, l.name)
	return l.b.Take(key, n)
}

func (l *logged) Peek(key string) keylimit.Result {
	*l.log = append(*l.log, "peek "+l.name)
	return l.b.Peek(key)
}

// loggedRefunder is logged with Admit and Refund.
type loggedRefunder struct{ *logged }

func (l loggedRefunder) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	*l.log = append(*l.log, l.name)
	return l.b.Admit(key, n)
}

func (l loggedRefunder) Refund(key string, a keylimit.Admission) {
	*l.log = append(*l.log, "-"+l.name)
	l.b.Refund(key, a)
}

// loggedLocal and loggedRemote are loggedRefunders whose Stats say where.
type (
	loggedLocal  struct{ loggedRefunder }
	loggedRemote struct{ loggedRefunder }
	// loggedLast is in process without Refund: only the last may be so.
	loggedLast struct{ *logged }
)

func (loggedLocal) Stats() keylimit.Stats  { return keylimit.Stats{} }
func (loggedRemote) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }
func (loggedLast) Stats() keylimit.Stats   { return keylimit.Stats{} }

// TestAllAsksInProcessRefundersFirst (issue 26): All asks the limiters in
// process that can Refund first, then the remote ones and those without
// Stats, each group in the order given; a refusal gives back in the
// reverse order asked. A limiter in process without Refund, the last,
// stays last. An All of in-process limiters is in process.
func TestAllAsksInProcessRefundersFirst(t *testing.T) {
	clk := keylimit.WithClock(newFastClock())
	var log []string
	on := func(name string, l keylimit.Limit) *logged {
		b := bucketsOn(t, clk, l)[0]
		return &logged{Limiter: b, b: b, name: name, log: &log}
	}
	r := loggedRemote{loggedRefunder{on("R", keylimit.PerHour(10))}}
	l1 := loggedLocal{loggedRefunder{on("L1", keylimit.PerHour(10))}}
	u := loggedRefunder{on("U", keylimit.PerHour(1))}
	l2 := loggedLocal{loggedRefunder{on("L2", keylimit.PerHour(10))}}
	lim := keylimit.All[string](r, l1, u, l2)
	require.True(t, lim.Allow("k"))
	require.Equal(t, []string{"L1", "L2", "R", "U"}, log, "the order asked")
	log = nil
	require.False(t, lim.Allow("k"), "U refuses")
	require.Equal(t, []string{"L1", "L2", "R", "U", "-R", "-L2", "-L1", "peek L1", "peek L2"}, log,
		"asked, given back in reverse, and the in-process ones peeked (not R: remote)")
	for _, l := range []*logged{r.logged, l1.logged, l2.logged} {
		require.Equal(t, 9, l.b.Peek("k").Remaining, "%s: the refusal took nothing", l.name)
	}

	log = nil
	last := loggedLast{on("N", keylimit.PerHour(1))}
	lim = keylimit.All[string](loggedRemote{loggedRefunder{on("R2", keylimit.PerHour(10))}}, last)
	require.True(t, lim.Allow("k"))
	require.Equal(t, []string{"R2", "N"}, log, "the last, without Refund, stays last")

	log = nil
	inner := keylimit.All[string](l1, l2)
	lim = keylimit.All[string](r, inner)
	require.True(t, lim.Allow("other"))
	require.Equal(t, []string{"L1", "L2", "R"}, log, "an All of in-process limiters is asked before a remote one")

	// A Penalty is where its Stats say the limiter it wraps is, and over an
	// All (which has no Stats), where the All is: over All(R), remote,
	// asked after the in-process one.
	pen, err := keylimit.NewPenalty(keylimit.All[string](r), keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Minute}, clk)
	require.NoError(t, err)
	t.Cleanup(func() { pen.Close() })
	require.True(t, pen.Stats().Remote, "a Penalty over All(R): its Stats say Remote")
	log = nil
	lim = keylimit.All[string](pen, l1)
	require.True(t, lim.Allow("penalty"))
	require.Equal(t, []string{"L1", "R"}, log, "a Penalty over All(R): the in-process limiter first")
}

// TestAllInProcessFirstKeepsResults: with a remote limiter given first,
// the Result of an admission is Result.And in the order given (a tie in
// Remaining reports the first given's Limit); a refusal reports the Limit
// of the limiter that refused, the in-process one, asking the remote one
// nothing; Peek reports the same Limit. An Admission of the All gives back
// each limiter's part, a partial refund a part of each, once.
func TestAllInProcessFirstKeepsResults(t *testing.T) {
	clk := newFastClock()
	bs := bucketsOn(t, keylimit.WithClock(clk), keylimit.PerHour(5), keylimit.PerHour(10))
	rec := &remoteRecorder{TokenBucket: bs[0]}
	local := bs[1]
	require.True(t, local.AllowN("k", 5))
	lim := keylimit.All[string](rec, local)

	r := lim.Take("k", 1)
	require.True(t, r.Allowed)
	require.Equal(t, [2]int{5, 4}, [2]int{r.Limit, r.Remaining}, "a tie at 4: the first given's Limit")

	r, adm := lim.(keylimit.Refunder[string]).Admit("k", 3)
	require.True(t, r.Allowed)
	require.Equal(t, [2]int{1, 1}, [2]int{rec.TokenBucket.Peek("k").Remaining, local.Peek("k").Remaining})
	one := adm
	one.N = 1
	lim.(keylimit.Refunder[string]).Refund("k", one)
	require.Equal(t, [2]int{2, 2}, [2]int{rec.TokenBucket.Peek("k").Remaining, local.Peek("k").Remaining}, "a refund of 1 of 3")
	rest := adm
	rest.N = 2
	lim.(keylimit.Refunder[string]).Refund("k", rest)
	require.Equal(t, [2]int{2, 2}, [2]int{rec.TokenBucket.Peek("k").Remaining, local.Peek("k").Remaining},
		"the other 2: nothing, a partial refund is the admission's one Refund (issue 37.8)")

	require.True(t, rec.TokenBucket.AllowN("k", 2))
	require.True(t, local.AllowN("k", 2))
	calls := rec.calls
	r = lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.Equal(t, 10, r.Limit, "the in-process limiter refused")
	require.Equal(t, local.Peek("k").RetryAfter, r.RetryAfter, "its RetryAfter: the remote one was not asked")
	require.Equal(t, calls, rec.calls, "the remote limiter's calls for a refusal in process")
	p := lim.Peek("k")
	require.False(t, p.Allowed)
	require.Equal(t, 10, p.Limit, "Peek names the limiter Take finds refusing")
}
