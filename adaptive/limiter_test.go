package adaptive_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/adaptive"
	"github.com/stretchr/testify/require"
)

// newAdaptive is an Adaptive of alg on a mock clock, closed when t ends.
func newAdaptive(t testing.TB, alg adaptive.Algorithm) (*adaptive.Limiter[string], *clock.Mock) {
	t.Helper()
	mock := clock.NewMock()
	a, err := adaptive.New[string](alg, keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a, mock
}

// grab has goroutines goroutines each ask for one slot of key at once, at
// criticality crit, and returns the permits admitted: TryAcquire for
// Default, else Acquire under a context that carries crit and ends soon
// (the mock clock stands still and nothing is released, so it tries once).
func grab(a *adaptive.Limiter[string], key string, goroutines int, crit keylimit.Criticality) []keylimit.Permit {
	var mu sync.Mutex
	var got []keylimit.Permit
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			var p keylimit.Permit
			var ok bool
			if crit == keylimit.Default {
				var r keylimit.Result
				p, r = a.TryAcquire(key, 1)
				ok = r.Allowed
			} else {
				ctx, cancel := context.WithTimeout(keylimit.WithCriticality(context.Background(), crit), 20*time.Millisecond)
				var err error
				p, err = a.Acquire(ctx, key, 1)
				cancel()
				ok = err == nil
			}
			if ok {
				mu.Lock()
				got = append(got, p)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return got
}

func releaseAll(ps []keylimit.Permit) {
	for _, p := range ps {
		p.Release()
	}
}

// With no release, the limits stand still: many goroutines on one key get
// exactly the room of their criticality under the starting limit (the
// floor, 20): Sheddable 15, Default 20, Critical 60 (three times the
// limit, the hard bound; it was a quarter more, 25, which left critical work refused
// while the server had room).
func TestAdaptiveCriticalityRoomExact(t *testing.T) {
	for _, c := range []struct {
		crit keylimit.Criticality
		want int
	}{{keylimit.Sheddable, 15}, {keylimit.Default, 20}, {keylimit.Critical, 60}} {
		a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
		require.Equal(t, 20, a.Stats().Limit)
		got := grab(a, "k", 200, c.crit)
		require.Len(t, got, c.want, "criticality %d", c.crit)
		st := a.Stats()
		require.Equal(t, uint64(200-c.want), st.Shed[c.crit], "sheds counted by criticality")
		releaseAll(got)
	}
}

// Under pressure sheddable work goes first and critical last: with the
// key holding 15 (three quarters of 20), a sheddable request is refused, a
// default one passes to 20, a critical one to 60 (the hard bound).
func TestAdaptiveCriticalityOrder(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
	held := grab(a, "k", 15, keylimit.Default)
	require.Len(t, held, 15)
	require.Empty(t, grab(a, "k", 50, keylimit.Sheddable))
	def := grab(a, "k", 50, keylimit.Default)
	require.Len(t, def, 5)
	require.Empty(t, grab(a, "k", 50, keylimit.Sheddable))
	crit := grab(a, "k", 50, keylimit.Critical)
	require.Len(t, crit, 40)
	st := a.Stats()
	require.Equal(t, [3]uint64{45, 10, 100}, st.Shed) // Default, Critical, Sheddable
	releaseAll(held)
	releaseAll(def)
	releaseAll(crit)
}

// Max-min fairness under the overall limit: a heavy key takes the whole
// overall limit (20); then a second key, below its fair share (20/2, and
// one more while another key holds slots: 11), takes the burst band above
// the limit (a quarter of it: 5, to 25), and the heavy one, above its
// share, nothing more; nor a third key, for the band is taken. Once the
// heavy key gives back 10, the third takes its share (20/3 rounded up,
// and one more: 8), the second 2 more to the band, 7, and the heavy key,
// at 10, above its share, still nothing.
func TestAdaptiveFairShareExact(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
	heavy := grab(a, "heavy", 300, keylimit.Default)
	require.Len(t, heavy, 20)
	small := grab(a, "small", 300, keylimit.Default)
	require.Len(t, small, 5, "a key below its fair share is admitted to the burst band above the overall limit")
	require.Empty(t, grab(a, "heavy", 300, keylimit.Default), "a key at or above its fair share is refused")
	require.False(t, a.Peek("heavy").Allowed, "Peek says so")
	require.False(t, a.Peek("third").Allowed, "and that a new key would not pass: the band is taken")
	require.Empty(t, grab(a, "third", 300, keylimit.Default))
	releaseAll(heavy[10:])
	third := grab(a, "third", 300, keylimit.Default)
	require.Len(t, third, 8)
	more := grab(a, "small", 300, keylimit.Default)
	require.Len(t, more, 2)
	require.Empty(t, grab(a, "heavy", 300, keylimit.Default))
	releaseAll(heavy[:10])
	releaseAll(small)
	releaseAll(more)
	releaseAll(third)
	require.True(t, a.Peek("heavy").Allowed)
}

// Many goroutines on four keys acquire, hold and release (some dropping):
// with the limit fixed (floor == ceiling, 12), never more than 12 slots are
// held in all, nor by one key, and everything is given back; with a
// moving limit (Gradient), never more than the ceiling.
func TestAdaptiveNeverAboveUnderRace(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD(12, 12), adaptive.Gradient(2, 12)} {
		const ceiling = 12
		a, err := adaptive.New[string](alg)
		require.NoError(t, err)
		var total, maxTotal, maxKey atomic.Int64
		var perKey [4]atomic.Int64
		var admitted atomic.Int64
		raise := func(m *atomic.Int64, v int64) {
			for o := m.Load(); v > o && !m.CompareAndSwap(o, v); o = m.Load() {
			}
		}
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				k := g % 4
				key := fmt.Sprint("k", k)
				for i := range 300 {
					p, r := a.TryAcquire(key, 1)
					if !r.Allowed {
						continue
					}
					admitted.Add(1)
					raise(&maxKey, perKey[k].Add(1))
					raise(&maxTotal, total.Add(1))
					perKey[k].Add(-1)
					total.Add(-1)
					if i%7 == 0 {
						p.Drop()
					} else {
						p.Release()
					}
				}
			})
		}
		wg.Wait()
		require.LessOrEqual(t, maxTotal.Load(), int64(ceiling))
		require.LessOrEqual(t, maxKey.Load(), int64(ceiling))
		require.Positive(t, admitted.Load())
		for k := range 4 {
			r := a.Peek(fmt.Sprint("k", k))
			require.Equal(t, min(r.Limit, a.Stats().Limit), r.Remaining, "key %d: nothing held", k)
		}
		a.Close()
	}
}

// Fairness under goroutines: a heavy key's 64 goroutines take the whole
// overall limit (20, exactly); then three light keys, each with 16
// goroutines at once, beside 16 more of the heavy key's, take exactly the
// burst band above the limit between them (5, to 25), none more than its
// share (20/2 + 1, for the first to ask), and the heavy one nothing more.
func TestAdaptiveFairShareUnderRace(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(20, 100))
	heavy := grab(a, "heavy", 64, keylimit.Default)
	require.Len(t, heavy, 20)
	var mu sync.Mutex
	light := map[string][]keylimit.Permit{}
	var wg sync.WaitGroup
	for _, key := range []string{"l1", "l2", "l3"} {
		wg.Go(func() {
			got := grab(a, key, 16, keylimit.Default)
			mu.Lock()
			light[key] = got
			mu.Unlock()
		})
	}
	wg.Go(func() { heavy = append(heavy, grab(a, "heavy", 16, keylimit.Default)...) })
	wg.Wait()
	require.Len(t, heavy, 20, "the heavy key is at its fair share and more: refused")
	lights := 0
	for key, ps := range light {
		require.LessOrEqual(t, len(ps), 11, key)
		lights += len(ps)
		releaseAll(ps)
	}
	require.Equal(t, 5, lights, "the burst band, exactly")
	releaseAll(heavy)
}

// With floor == ceiling the limit cannot move: 1,000 goroutines on one key get exactly N, and N again once they release.
func TestAdaptiveFixedLimitExact(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.Gradient(7, 7))
	for range 3 {
		got := grab(a, "k", 1000, keylimit.Default)
		require.Len(t, got, 7)
		releaseAll(got)
	}
}

// A Permit's release happens once, whichever of Release and Drop comes
// first and however many copies.
func TestAdaptiveReleaseOnce(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.Gradient(2, 2))
	p1, r := a.TryAcquire("k", 1)
	require.True(t, r.Allowed)
	p2, _ := a.TryAcquire("k", 1)
	copy1 := p1
	p1.Drop()
	copy1.Release()
	p1.Release()
	require.Equal(t, 1, a.Peek("k").Remaining)
	p3, r := a.TryAcquire("k", 1) // may reuse p1's record
	require.True(t, r.Allowed)
	copy1.Drop() // stale: frees nothing of p3's
	require.Equal(t, 0, a.Peek("k").Remaining)
	p2.Release()
	p3.Release()
	require.Equal(t, 2, a.Peek("k").Remaining)
}

// Acquire waits for a release, and gives up with its context.
func TestAdaptiveAcquireWaits(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.AIMD(1, 1))
	p, r := a.TryAcquire("k", 1)
	require.True(t, r.Allowed)
	done := make(chan error, 1)
	go func() {
		q, err := a.Acquire(context.Background(), "k", 1)
		q.Release()
		done <- err
	}()
	for a.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	p.Release()
	require.NoError(t, <-done)

	p, _ = a.TryAcquire("k", 1)
	defer p.Release()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for a.Stats().Waiting == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := a.Acquire(ctx, "k", 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, [3]uint64{1, 0, 0}, a.Stats().Shed, "one shed for an Acquire that gave up, however many tries; none for one that waited and passed")
	_, err = a.Acquire(context.Background(), "k", 2)
	require.ErrorIs(t, err, keylimit.ErrExceedsLimit)
}

func TestNewAdaptiveErrors(t *testing.T) {
	for _, c := range []struct {
		alg  adaptive.Algorithm
		want string
	}{
		{adaptive.Algorithm{}, "needs an Algorithm"},
		{adaptive.AIMD(0, 10), "floor 0 is below 1"},
		{adaptive.Gradient(5, 4), "ceiling 4 is below its floor 5"},
		{adaptive.Gradient(1, keylimit.MaxConcurrency+1), "above MaxConcurrency"},
	} {
		_, err := adaptive.New[string](c.alg)
		require.ErrorContains(t, err, c.want)
	}
	_, err := adaptive.New[string](adaptive.AIMD(1, 2), keylimit.WithMaxHold(time.Second))
	require.Error(t, err)
}

// drive runs rounds on one key of a on its mock clock: each round takes
// every slot it can, lets latency pass, and releases them all (dropping
// them if drop), and returns the overall and the key's limit after.
func drive(a *adaptive.Limiter[string], mock *clock.Mock, rounds int, latency time.Duration, drop bool) (overall, key int) {
	for range rounds {
		var ps []keylimit.Permit
		for {
			p, r := a.TryAcquire("svc", 1)
			if !r.Allowed {
				break
			}
			ps = append(ps, p)
		}
		mock.Add(latency)
		for _, p := range ps {
			if drop {
				p.Drop()
			} else {
				p.Release()
			}
		}
	}
	return a.Stats().Limit, a.Peek("svc").Limit
}

// Each algorithm, on a mock clock, with the key always busy: the limit
// climbs at a steady latency, falls when latency rises (or calls are
// dropped), and climbs back once they stop.
func TestAdaptiveConverges(t *testing.T) {
	for _, c := range []struct {
		name string
		alg  adaptive.Algorithm
	}{{"aimd", adaptive.AIMD(2, 200)}, {"gradient", adaptive.Gradient(2, 200)}} {
		t.Run(c.name, func(t *testing.T) {
			for _, drop := range []bool{false, true} {
				a, mock := newAdaptive(t, c.alg)
				start := a.Stats().Limit
				up, upKey := drive(a, mock, 30, 10*time.Millisecond, false)
				require.Greater(t, up, start, "steady latency, busy: the limit grows")
				require.Greater(t, upKey, start)
				slow := 40 * time.Millisecond
				if drop {
					slow = 10 * time.Millisecond
				}
				down, downKey := drive(a, mock, 30, slow, drop)
				require.Less(t, down, up/2, "latency rose (or calls dropped): the limit falls")
				require.Less(t, downKey, upKey/2)
				again, againKey := drive(a, mock, 60, 10*time.Millisecond, false)
				require.Greater(t, again, down, "back to the steady latency: the limit grows again")
				require.Greater(t, againKey, downKey)
				t.Logf("drop=%v: start %d, up %d, down %d, again %d", drop, start, up, down, again)
			}
		})
	}
}

// A key's limit adapts from its own calls: a key whose calls slow down
// shrinks its own limit, not another key's.
func TestAdaptiveKeyLimitIsItsOwn(t *testing.T) {
	a, mock := newAdaptive(t, adaptive.Gradient(2, 200))
	drive(a, mock, 30, 10*time.Millisecond, false)
	other, _ := a.TryAcquire("quiet", 1) // a key starts at the overall limit
	before := a.Peek("quiet").Limit
	require.Equal(t, a.Stats().Limit, before)
	drive(a, mock, 30, 10*time.Millisecond, true)
	other.Release()
	require.Equal(t, before, a.Peek("quiet").Limit)
	require.Less(t, a.Peek("svc").Limit, before/2)
}

func TestAdaptiveAllocs(t *testing.T) {
	a, _ := newAdaptive(t, adaptive.Gradient(10, 100))
	p, _ := a.TryAcquire("k", 1)
	p.Release()
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := a.TryAcquire("k", 1)
		p.Release()
	})
	require.Zero(t, allocs)
	allocs = testing.AllocsPerRun(1000, func() {
		p, _ := a.TryAcquire("k", 1)
		p.Drop()
	})
	require.Zero(t, allocs)
}

// serveQueue runs rounds of a service of workers workers, each call
// service long, on the mock clock: each round takes every slot the key
// "svc" may hold, and a call's latency is its wait in the queue plus its
// service (n calls take service × ⌈n/workers⌉). It returns the most the
// overall limit was after round skip, and its mean over those rounds.
func serveQueue(a *adaptive.Limiter[string], mock *clock.Mock, rounds, skip, workers int, service time.Duration) (most int, mean float64) {
	for i := range rounds {
		var ps []keylimit.Permit
		for {
			p, r := a.TryAcquire("svc", 1)
			if !r.Allowed {
				break
			}
			ps = append(ps, p)
		}
		mock.Add(service * time.Duration((len(ps)+workers-1)/workers))
		for _, p := range ps {
			p.Release()
		}
		if i >= skip {
			most = max(most, a.Stats().Limit)
			mean += float64(a.Stats().Limit) / float64(rounds-skip)
		}
	}
	return most, mean
}

// A queue that lasts is not taken for the service's latency: against 8
// workers, each algorithm holds the limit near 8 (within 3×, and 8 on
// average, so the workers are kept busy: a limit of 9 doubles the latency
// here, and AIMD's cut for it, to 7, is undone in two windows) for a long
// run, where a baseline that followed the means would let it grow to the
// ceiling. Halve the workers, and the limit follows them down.
func TestAdaptiveQueueDoesNotDrift(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD(1, 1000), adaptive.Gradient(1, 1000)} {
		a, mock := newAdaptive(t, alg)
		most, mean := serveQueue(a, mock, 2000, 200, 8, 10*time.Millisecond)
		require.LessOrEqual(t, most, 24)
		require.GreaterOrEqual(t, mean, 7.9, "the workers are kept busy")
		most, mean = serveQueue(a, mock, 500, 100, 4, 10*time.Millisecond)
		require.LessOrEqual(t, most, 12)
		require.GreaterOrEqual(t, mean, 3.9)
	}
}

// A service that is slower for good (no queue: every call takes 30 ms,
// however many) is learnt: the limit falls to the floor, where the
// baseline follows the latency, and grows back.
func TestAdaptiveLearnsASlowerService(t *testing.T) {
	for _, alg := range []adaptive.Algorithm{adaptive.AIMD(2, 200), adaptive.Gradient(2, 200)} {
		a, mock := newAdaptive(t, alg)
		up, _ := drive(a, mock, 40, 10*time.Millisecond, false)
		drive(a, mock, 40, 30*time.Millisecond, false)
		low := a.Stats().Limit
		require.Less(t, low, up)
		again, _ := drive(a, mock, 400, 30*time.Millisecond, false)
		require.GreaterOrEqual(t, again, 2*low, "the slower service, once learnt, is given room again")
	}
}

// At the key cap, a new key is untracked (refused, by default) while the
// tracked one holds a slot, and tracked once that key is idle: it is
// forgotten, and starts again from the overall limit.
func TestAdaptiveKeyCap(t *testing.T) {
	a, err := adaptive.New[string](adaptive.AIMD(2, 4), keylimit.WithClock(clock.NewMock()), keylimit.WithMaxKeys(1))
	require.NoError(t, err)
	defer a.Close()
	p, r := a.TryAcquire("a", 1)
	require.True(t, r.Allowed)
	_, r = a.TryAcquire("b", 1)
	require.False(t, r.Allowed)
	require.True(t, r.Untracked)
	require.Equal(t, [3]uint64{}, a.Stats().Shed, "an untracked key is not a shed")
	p.Release()
	q, r := a.TryAcquire("b", 1)
	require.True(t, r.Allowed, "a, idle, was forgotten to make room")
	q.Release()
	st := a.Stats()
	require.Equal(t, 1, st.Keys)
	require.Equal(t, uint64(1), st.Evicted)
	require.Equal(t, uint64(1), st.Untracked)
}

// A Limiter dropped without Close stops its evictor once it is garbage,
// as keylimit's limiters do: the store it borrows from keylimit (see
// keys.go) is held by the evictor's goroutine, the evictor's owner by the
// limiter alone, whatever its permits and keys hold.
func TestForgottenCloseDoesNotLeakTheEvictor(t *testing.T) {
	runtime.GC()
	before := runtime.NumGoroutine()
	func() {
		for range 20 {
			a, err := adaptive.New[string](adaptive.AIMD(1, 4), keylimit.WithEvictionInterval(time.Millisecond))
			require.NoError(t, err)
			p, r := a.TryAcquire("k", 1)
			require.True(t, r.Allowed)
			p.Drop()
		}
	}()
	require.GreaterOrEqual(t, runtime.NumGoroutine(), before+20, "each limiter runs an evictor")
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; {
		require.True(t, time.Now().Before(deadline), "the evictors of unreachable limiters did not stop: %d goroutines, %d before", runtime.NumGoroutine(), before)
		runtime.GC()
		time.Sleep(time.Millisecond)
	}

	a, err := adaptive.New[string](adaptive.AIMD(1, 4))
	require.NoError(t, err)
	require.Equal(t, before+1, runtime.NumGoroutine())
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close twice is fine")
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "Close did not stop the evictor")
	}
	_, r := a.TryAcquire("k", 1)
	require.True(t, r.Allowed, "a closed limiter still answers")
}
