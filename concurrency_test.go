package keylimit_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/stretchr/testify/require"
)

// newConcurrency returns a Concurrency of n slots with opts, closed when the
// test ends.
func newConcurrency(t testing.TB, n int, opts ...keylimit.Option) *keylimit.Concurrency[string] {
	t.Helper()
	c, err := keylimit.NewConcurrency[string](n, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// quiet logs nothing: for the tests whose slots are taken back on purpose.
var quiet = keylimit.WithLogger(slog.New(slog.DiscardHandler))

// TestConcurrencyBehaviour runs the concurrency suite against Concurrency,
// on a mock clock.
func TestConcurrencyBehaviour(t *testing.T) {
	var mock *clock.Mock
	limitertest.Run(t, limitertest.Harness{
		Concurrency: func(t *testing.T, n int, maxHold time.Duration) (keylimit.ConcurrencyLimiter[string], error) {
			mock = clock.NewMock()
			c, err := keylimit.NewConcurrency[string](n, keylimit.WithClock(mock), keylimit.WithMaxHold(maxHold), quiet)
			if err != nil {
				return nil, err // not a typed nil in an interface
			}
			return c, nil
		},
		Advance:  func(d time.Duration) { mock.Add(d) },
		Attempts: sized(20_000, 200_000),
	})
}

// TestConcurrencyIsNotALimiter: a Concurrency has no Take, whose slots
// nothing could give back, so All and the rate middleware cannot be handed
// one by mistake.
func TestConcurrencyIsNotALimiter(t *testing.T) {
	var c any = newConcurrency(t, 1)
	_, isLimiter := c.(keylimit.Limiter[string])
	require.False(t, isLimiter)
	_, ok := c.(keylimit.ConcurrencyLimiter[string])
	require.True(t, ok)
}

// TestConcurrencyAllocs: for a key seen before, TryAcquire with its
// Release, Acquire with its Release when the slots are free, a refused
// TryAcquire and Peek allocate nothing, on the system clock and an
// injected one, with and without a longest hold.
func TestConcurrencyAllocs(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []keylimit.Option
	}{
		{"clock=system", nil},
		{"clock=injected", []keylimit.Option{keylimit.WithClock(newFastClock())}},
		{"clock=system/maxhold", []keylimit.Option{keylimit.WithMaxHold(time.Hour)}},
		{"clock=injected/maxhold", []keylimit.Option{keylimit.WithClock(newFastClock()), keylimit.WithMaxHold(time.Hour)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConcurrency(t, 1, tt.opts...)
			key := fmt.Sprintf("user-%d", 42) // not a constant the compiler can place
			ctx := context.Background()
			p, _ := c.TryAcquire(key, 1)
			p.Release()
			require.Zero(t, testing.AllocsPerRun(1000, func() {
				p, _ := c.TryAcquire(key, 1)
				p.Release()
			}), "TryAcquire and Release")
			require.Zero(t, testing.AllocsPerRun(1000, func() {
				p, _ := c.Acquire(ctx, key, 1)
				p.Release()
			}), "Acquire and Release")
			require.Zero(t, testing.AllocsPerRun(1000, func() { c.Peek(key) }), "Peek")
			p, _ = c.TryAcquire(key, 1)
			require.Zero(t, testing.AllocsPerRun(1000, func() { c.TryAcquire(key, 1) }), "refused TryAcquire")
			p.Release()
		})
	}
}

// TestConcurrencyOptionErrors: a Concurrency refuses a limit out of range
// and an invalid option; every rate limiter refuses WithMaxHold.
func TestConcurrencyOptionErrors(t *testing.T) {
	for _, tt := range []struct {
		n    int
		opt  keylimit.Option
		want string
	}{
		{1, keylimit.WithMaxHold(-time.Second), "keylimit: longest hold -1s is negative"},
		{1, keylimit.WithMaxHold(1 << 61), "keylimit: longest hold 640511h56m49.213693952s is longer than 320255h58m24.606846976s"},
		{1, keylimit.WithMaxKeys(0), "keylimit: max keys 0 is below 1"},
		{0, keylimit.Option{}, "keylimit: concurrency limit 0 is below 1"},
		{keylimit.MaxConcurrency + 1, keylimit.Option{}, "keylimit: concurrency limit 1048576 is above MaxConcurrency (1048575)"},
	} {
		c, err := keylimit.NewConcurrency[string](tt.n, tt.opt)
		require.EqualError(t, err, tt.want)
		require.Nil(t, c)
	}
	c := newConcurrency(t, 1)
	require.EqualError(t, c.SetLimit(keylimit.MaxConcurrency+1), "keylimit: concurrency limit 1048576 is above MaxConcurrency (1048575)")
	require.Equal(t, 1, c.Stats().Limit)
	for _, k := range kinds {
		lim, err := k.new(keylimit.PerSecond(1), keylimit.WithMaxHold(time.Second))
		require.EqualError(t, err, "keylimit: WithMaxHold is an option of a Concurrency: a rate limiter holds nothing", k.name)
		require.Nil(t, lim, k.name)
	}
}

// TestConcurrencyEviction: a key is forgotten once nothing of it is held
// and nobody waits, never before; one whose slots a longest hold takes back
// is forgotten by the sweep that takes them.
func TestConcurrencyEviction(t *testing.T) {
	mock := clock.NewMock()
	c := newConcurrency(t, 2, keylimit.WithClock(mock), keylimit.WithEvictionInterval(time.Millisecond), keylimit.WithMaxHold(time.Minute), quiet)
	held, _ := c.TryAcquire("held", 1)
	c.TryAcquire("lost", 2) // never released
	released, _ := c.TryAcquire("released", 1)
	released.Release()
	queue, _ := c.TryAcquire("queue", 2)
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error)
	go func() {
		_, err := c.Acquire(ctx, "queue", 1)
		waiter <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return c.Stats().Waiting == 1 })
	queue.Release() // the waiter gets a slot: "queue" is held again
	waitFor(t, "the released key to go", func() bool { return c.Stats().Keys == 3 })
	require.NoError(t, <-waiter)
	cancel()
	time.Sleep(20 * time.Millisecond) // sweeps
	require.Equal(t, 3, c.Stats().Keys, "held, lost and queue are held")

	mock.Add(119 * time.Second) // lost is in epoch 0: at 120 s it is taken back
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, 3, c.Stats().Keys, "a hold is not taken back before its time")
	mock.Add(time.Second)
	waitFor(t, "the sweeps to take back lost, queue and held, and forget them", func() bool { return c.Stats().Keys == 0 })
	require.Equal(t, uint64(4), c.Stats().Reclaimed, "lost's 2, queue's waiter's 1 and held's 1")
	held.Release() // gives back nothing
	require.Equal(t, 2, c.Peek("held").Remaining)
	require.Zero(t, c.Stats().Keys)
}

// TestConcurrencyMemory: a key costs at most 128 heap bytes (114 measured),
// its 16-byte key included (the limiter keeps a hash of it): 64 of state
// (the word, the estimate, the waiters' queue, the key's own hold record)
// and the map's entry. Once idle, keys are forgotten and the heap is back
// within 10% of an empty limiter's. 16,000 keys (a million under -full).
func TestConcurrencyMemory(t *testing.T) {
	n := sized(16_000, 1_000_000)
	// fill acquires a slot of n keys, and returns the permits.
	fill := func(c *keylimit.Concurrency[string]) []keylimit.Permit {
		var id [8]byte
		var key [16]byte
		permits := make([]keylimit.Permit, n)
		for i := range n {
			binary.BigEndian.PutUint64(id[:], uint64(i))
			hex.Encode(key[:], id[:])
			var r keylimit.Result
			permits[i], r = c.TryAcquire(string(key[:]), 1)
			require.True(t, r.Allowed)
		}
		require.Equal(t, n, c.Stats().Keys)
		return permits
	}
	c, err := keylimit.NewConcurrency[string](10, keylimit.WithEvictionInterval(0))
	require.NoError(t, err)
	empty := heapInUse()
	permits := fill(c)
	perKey := float64(heapInUse()-empty-uint64(n)*uint64(unsafe.Sizeof(keylimit.Permit{}))) / float64(n)
	runtime.KeepAlive(permits) // counted, and taken off
	t.Logf("%d keys, %.1f heap bytes per key, key included", n, perKey)
	require.LessOrEqual(t, perKey, 128.0)
	require.NoError(t, c.Close())
	c = nil

	c = newConcurrency(t, 10, keylimit.WithEvictionInterval(20*time.Millisecond))
	empty = heapInUse()
	for _, p := range fill(c) {
		p.Release()
	}
	waitFor(t, "the evictor to forget every key", func() bool { return c.Stats().Keys == 0 })
	requireHeapBack(t, empty)
}

// TestConcurrencyKeyCap: at the key cap, a new key is tracked once a held
// key has been released (which a later sweep can see), and not before;
// held keys keep their slots. The regression: a key left idle by a release
// did not lower the time before which the cap's sweep finds nothing, and
// new keys stayed untracked.
func TestConcurrencyKeyCap(t *testing.T) {
	c := newConcurrency(t, 1, keylimit.WithMaxKeys(2), keylimit.WithEvictionInterval(0), keylimit.WithStats())
	a, _ := c.TryAcquire("a", 1)
	c.TryAcquire("b", 1)
	_, r := c.TryAcquire("c", 1)
	require.Equal(t, keylimit.Result{Limit: 1, RetryAfter: time.Second, Untracked: true}, r, "at the cap with every key held")
	_, err := c.Acquire(canceledAfter(t, 30*time.Millisecond), "c", 1)
	require.ErrorIs(t, err, context.Canceled, "Acquire of an untracked key waits for room")
	a.Release()
	p, r := c.TryAcquire("c", 1)
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 1}, r, "a was released: the sweep at the cap forgets it")
	require.Equal(t, 2, c.Stats().Keys)
	require.False(t, c.Peek("b").Allowed, "b keeps its slot")
	p.Release()
	st := c.Stats()
	require.Equal(t, uint64(2), st.Untracked)
	require.Equal(t, uint64(1), st.Evicted)
}

// canceledAfter returns a context cancelled after d of real time.
func canceledAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

// TestConcurrencyAdmitUntracked: with WithAdmitUntracked, a key the cap
// cannot track is let through holding nothing.
func TestConcurrencyAdmitUntracked(t *testing.T) {
	c := newConcurrency(t, 1, keylimit.WithMaxKeys(1), keylimit.WithAdmitUntracked(), keylimit.WithEvictionInterval(0))
	c.TryAcquire("a", 1)
	p, r := c.TryAcquire("b", 1)
	require.Equal(t, keylimit.Result{Allowed: true, Limit: 1, Untracked: true}, r)
	require.Equal(t, keylimit.Permit{}, p)
	p, err := c.Acquire(context.Background(), "b", 1)
	require.NoError(t, err)
	require.Equal(t, keylimit.Permit{}, p)
}

// TestConcurrencyStats: WithStats counts every decision, exactly, under
// contention; Waiting counts the Acquires queued.
func TestConcurrencyStats(t *testing.T) {
	c := newConcurrency(t, 3, keylimit.WithStats())
	var admitted, refused atomic.Uint64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				p, r := c.TryAcquire("k", 1)
				if r.Allowed {
					admitted.Add(1)
					p.Release()
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := c.Stats()
	require.Equal(t, keylimit.Stats{Decisions: true, Keys: 1, Limit: 3, Admitted: admitted.Load(), Refused: refused.Load()}, st)
	c.TryAcquire("k", 4) // can never pass: refused
	c.TryAcquire("k", 0) // no decision
	require.Equal(t, refused.Load()+1, c.Stats().Refused)
}

// TestConcurrencyReclaimIsLogged: slots taken back are logged the first
// time, and then at most once a minute of the limiter's clock, with the
// slots taken back since the line before.
func TestConcurrencyReclaimIsLogged(t *testing.T) {
	var buf bytes.Buffer
	mock := clock.NewMock()
	c := newConcurrency(t, 5, keylimit.WithClock(mock), keylimit.WithMaxHold(10*time.Second),
		keylimit.WithLogger(textLogger(&buf)), keylimit.WithEvictionInterval(0))
	line := `level=WARN msg="keylimit: slots held past the longest hold were taken back; their holders never released them" max_hold=10s slots=%d reclaimed_so_far=%d` + "\n"
	c.TryAcquire("a", 2)
	mock.Add(20 * time.Second)
	c.TryAcquire("a", 1) // takes back a's 2
	require.Equal(t, fmt.Sprintf(line, 2, 2), buf.String())
	buf.Reset()
	for range 2 {
		mock.Add(20 * time.Second) // the 1 acquired 20 s ago is taken back
		c.TryAcquire("a", 1)
	}
	require.Empty(t, buf.String(), "within the minute of the first line")
	mock.Add(20 * time.Second)
	c.TryAcquire("a", 1)
	require.Equal(t, fmt.Sprintf(line, 3, 5), buf.String(), "a minute after the first line, with the 3 taken back since")
	require.Equal(t, uint64(5), c.Stats().Reclaimed)
}

// TestConcurrencyRetryAfterEstimate: a refusal's RetryAfter comes from the
// key's recent hold times (a sample of them, one in 16): with holds of 4 s
// and 2 of 2 slots held, one slot is estimated free in 2 s; before any
// hold is timed, it is a second, or the longest hold.
func TestConcurrencyRetryAfterEstimate(t *testing.T) {
	mock := clock.NewMock()
	c := newConcurrency(t, 2, keylimit.WithClock(mock))
	a, _ := c.TryAcquire("fresh", 1)
	b, _ := c.TryAcquire("fresh", 1)
	_, r := c.TryAcquire("fresh", 1)
	require.Equal(t, time.Second/2, r.RetryAfter, "no hold timed yet: a second × 1 slot needed / 2")
	a.Release()
	b.Release()
	for range 64 { // 64 holds through the pool's records: some are timed
		p, _ := c.TryAcquire("k", 1)
		mock.Add(4 * time.Second)
		p.Release()
	}
	c.TryAcquire("k", 2)
	_, r = c.TryAcquire("k", 1)
	require.Equal(t, 2*time.Second, r.RetryAfter)
	require.Equal(t, 2*time.Second, c.Peek("k").RetryAfter)

	d := newConcurrency(t, 1, keylimit.WithClock(mock), keylimit.WithMaxHold(time.Minute))
	d.TryAcquire("k", 1)
	_, r = d.TryAcquire("k", 1)
	require.Equal(t, time.Minute, r.RetryAfter, "no hold timed yet: the longest hold")
}

// blockingClock is a clock whose Now, once armed, blocks its next caller
// until released: it holds an acquisition between its reading of the
// limit and its CAS.
type blockingClock struct {
	*clock.Mock
	armed    atomic.Bool
	blocked  chan struct{} // closed when a caller is blocked
	released chan struct{}
}

func (c *blockingClock) Now() time.Time {
	if c.armed.CompareAndSwap(true, false) {
		close(c.blocked)
		<-c.released
	}
	return c.Mock.Now()
}

// TestConcurrencySetLimitRacingAnAcquisition: an acquisition that read the
// old limit before SetLimit lowered it, and makes its CAS after SetLimit
// returned, does not go above the new limit. The regression: it did, so
// that after SetLimit(2) returned, 6 of a key's slots were held with no
// acquisition of the old holders left.
func TestConcurrencySetLimitRacingAnAcquisition(t *testing.T) {
	clk := &blockingClock{Mock: clock.NewMock(), blocked: make(chan struct{}), released: make(chan struct{})}
	c := newConcurrency(t, 8, keylimit.WithClock(clk), keylimit.WithMaxHold(time.Hour)) // a longest hold: decisions read the clock
	for range 5 {
		c.TryAcquire("k", 1)
	}
	clk.armed.Store(true)
	result := make(chan keylimit.Result)
	go func() {
		_, r := c.TryAcquire("k", 1)
		result <- r
	}()
	<-clk.blocked // the acquisition has read the limit 8 and the word of 5 held
	require.NoError(t, c.SetLimit(2))
	close(clk.released)
	r := <-result
	require.False(t, r.Allowed, "an acquisition decided on the old limit after SetLimit returned: %v", r)
	require.Equal(t, 0, c.Peek("k").Remaining)
	require.Equal(t, 2, r.Limit)
}

// TestConcurrencyHammer: 64 goroutines acquire (trying, waiting, waiting
// with deadlines that run out, cancelled) and release slots of 4 keys,
// holding each for a random time, while SetLimit flips the limit and the
// evictor sweeps every millisecond. Each key's slots held are counted,
// and at every acquisition checked against the largest limit in force
// during the call: exactly, with no "usually". Every acquisition and
// release is counted, against each other and against Stats. It runs 1 s
// (5 s under -full).
func TestConcurrencyHammer(t *testing.T) {
	limits := []int{6, 2, 9, 1, 4, 3} // the flipper cycles through them
	c := newConcurrency(t, limits[0], keylimit.WithEvictionInterval(time.Millisecond), keylimit.WithStats())
	keys := []string{"a", "b", "c", "d"}
	var (
		phase              atomic.Int64 // how many SetLimits have returned
		inFlight           [4]atomic.Int64
		over               atomic.Int64
		acquired, released atomic.Int64
		refused, canceled  atomic.Int64
		stop               atomic.Bool
		firstOver          atomic.Value
		wg                 sync.WaitGroup
	)
	// bound is the largest limit in force between phases from and to: the
	// SetLimit of phase to+1 may be under way.
	bound := func(from, to int64) int64 {
		m := 0
		for g := from; g <= to+1; g++ {
			m = max(m, limits[g%int64(len(limits))])
		}
		return int64(m)
	}
	wg.Go(func() {
		for g := int64(1); !stop.Load(); g++ {
			if err := c.SetLimit(limits[g%int64(len(limits))]); err != nil {
				panic(err)
			}
			phase.Store(g)
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		}
	})
	for g := range 64 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 27))
			for !stop.Load() {
				i := rnd.IntN(len(keys))
				n := 1 + rnd.IntN(2)
				from := phase.Load()
				var p keylimit.Permit
				var err error
				switch mode := rnd.IntN(4); mode {
				case 0:
					var r keylimit.Result
					if p, r = c.TryAcquire(keys[i], n); !r.Allowed {
						err = errors.New("refused")
					}
				case 1:
					p, err = c.Acquire(context.Background(), keys[i], n)
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.IntN(500))*time.Microsecond)
					if mode == 3 {
						go cancel() // cancelled while it may be waiting
					}
					p, err = c.Acquire(ctx, keys[i], n)
					cancel()
				}
				if err != nil {
					if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
						canceled.Add(1)
					} else {
						refused.Add(1)
					}
					continue
				}
				acquired.Add(1)
				if now, most := inFlight[i].Add(int64(n)), bound(from, phase.Load()); now > most {
					over.Add(1)
					firstOver.CompareAndSwap(nil, fmt.Sprintf("key %s: %d held, limit at most %d", keys[i], now, most))
				}
				switch rnd.IntN(4) {
				case 0:
					time.Sleep(time.Duration(rnd.IntN(200)) * time.Microsecond)
				case 1:
					for range rnd.IntN(1000) {
						_ = rnd.Int() // busy
					}
				}
				inFlight[i].Add(-int64(n)) // before the Release: never below what the limiter holds
				released.Add(1)
				p.Release()
				if rnd.IntN(16) == 0 {
					p.Release() // frees nothing
				}
			}
		})
	}
	time.Sleep(time.Duration(sized(1, 5)) * time.Second)
	stop.Store(true)
	wg.Wait()
	require.Zero(t, over.Load(), "acquisitions above the limit in force; the first: %v", firstOver.Load())
	require.Equal(t, acquired.Load(), released.Load())
	require.NotZero(t, acquired.Load())
	require.NotZero(t, canceled.Load(), "no wait was cut short")
	st := c.Stats()
	// An Acquire cancelled before it asked is no decision; one that gave up
	// waiting is a refusal: only admissions can be counted exactly.
	require.Equal(t, uint64(acquired.Load()), st.Admitted)
	require.Zero(t, st.Waiting)
	for _, k := range keys {
		require.Equal(t, c.Stats().Limit, c.Peek(k).Remaining, "key %s once every holder released", k)
	}
	waitFor(t, "every key to be evicted", func() bool { return c.Stats().Keys == 0 })
	t.Logf("%d acquired, %d refused, %d gave up, %d SetLimits, %d evictions", acquired.Load(), refused.Load(), canceled.Load(), phase.Load(), st.Evicted)
}

// TestConcurrencyNewPermit: a Permit of NewPermit calls its release once,
// whichever copy is released and however often.
func TestConcurrencyNewPermit(t *testing.T) {
	var calls atomic.Int64
	p := keylimit.NewPermit(func() { calls.Add(1) })
	q := p
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { p.Release(); q.Release() })
	}
	wg.Wait()
	require.Equal(t, int64(1), calls.Load())
}

// TestConcurrencyAcquireErrors: the errors say what failed.
func TestConcurrencyAcquireErrors(t *testing.T) {
	c := newConcurrency(t, 2)
	_, err := c.Acquire(context.Background(), "k", 3)
	require.EqualError(t, err, "keylimit: n exceeds the limit: 3 slots can never be held at once under a concurrency limit of 2")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Acquire(ctx, "k", 1)
	require.EqualError(t, err, "keylimit: acquire 1 slot: context canceled")
	c.TryAcquire("k", 2)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = c.Acquire(ctx, "k", 2)
	require.EqualError(t, err, "keylimit: acquire 2 slots: context deadline exceeded")
	require.True(t, strings.HasPrefix(err.Error(), "keylimit: "))
}

// Drop on another limiter's Permit is its Release.
func TestDropIsReleaseElsewhere(t *testing.T) {
	c, err := keylimit.NewConcurrency[string](1)
	require.NoError(t, err)
	defer c.Close()
	p, r := c.TryAcquire("k", 1)
	require.True(t, r.Allowed)
	p.Drop()
	require.True(t, c.Peek("k").Allowed)
	calls := 0
	np := keylimit.NewPermit(func() { calls++ })
	np.Drop()
	np.Release()
	require.Equal(t, 1, calls)
	keylimit.Permit{}.Drop() // the zero Permit holds nothing
}
