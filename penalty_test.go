package keylimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/limitertest"
	"github.com/stretchr/testify/require"
)

// counting is a limiter that counts the calls that reach it.
type counting struct {
	keylimit.Limiter[string]
	calls atomic.Int64
}

func (c *counting) AllowN(key string, n int) bool {
	c.calls.Add(1)
	return c.Limiter.AllowN(key, n)
}

func (c *counting) Peek(key string) keylimit.Result {
	c.calls.Add(1)
	return c.Limiter.Peek(key)
}

func (c *counting) Take(key string, n int) keylimit.Result {
	c.calls.Add(1)
	return c.Limiter.Take(key, n)
}

func (c *counting) Admit(key string, n int) (keylimit.Result, keylimit.Admission) {
	c.calls.Add(1)
	return c.Limiter.(keylimit.Refunder[string]).Admit(key, n)
}

func (c *counting) Refund(key string, a keylimit.Admission) {
	c.Limiter.(keylimit.Refunder[string]).Refund(key, a)
}

// penaltyOn returns a Penalty of ban around a counted TokenBucket of l, on
// a mock clock.
func penaltyOn(t *testing.T, l keylimit.Limit, ban keylimit.Ban, opts ...keylimit.Option) (*keylimit.Penalty[string], *counting, *clock.Mock) {
	t.Helper()
	c := clock.NewMock()
	b, err := keylimit.NewTokenBucket[string](l, keylimit.WithClock(c))
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	inner := &counting{Limiter: b}
	p, err := keylimit.NewPenalty[string](inner, ban, append([]keylimit.Option{keylimit.WithClock(c)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p, inner, c
}

// penaltyStep is one request of a step table: at a time since the start,
// its answer, and the calls the limiter has had after it.
type penaltyStep struct {
	at      time.Duration
	allowed bool
	banned  bool
	retry   time.Duration // RetryAfter, when refused
	calls   int64
}

func runPenaltySteps(t *testing.T, p *keylimit.Penalty[string], inner *counting, c *clock.Mock, steps []penaltyStep) {
	t.Helper()
	start := c.Now()
	for i, st := range steps {
		c.Set(start.Add(st.at))
		r := p.Take("k", 1)
		require.Equal(t, st.allowed, r.Allowed, "step %d: allowed (%v)", i, r)
		require.Equal(t, st.banned, r.Banned, "step %d: banned (%v)", i, r)
		if !st.allowed {
			require.Equal(t, st.retry, r.RetryAfter, "step %d: RetryAfter (%v)", i, r)
		}
		require.Equal(t, st.calls, inner.calls.Load(), "step %d: the limiter's calls", i)
	}
}

// The rule, on a grid: 3 refusals within 10 s ban for a minute, exactly;
// 2 do not; 3 spaced 10 s apart (end to end) do not.
func TestPenaltyBansOnItsRefusals(t *testing.T) {
	ban := keylimit.Ban{Refusals: 3, Within: 10 * s, For: time.Minute}
	p, inner, c := penaltyOn(t, keylimit.PerHour(1), ban)
	hour := time.Hour
	runPenaltySteps(t, p, inner, c, []penaltyStep{
		{at: 0, allowed: true, calls: 1},
		{at: 0, retry: hour, calls: 2},                         // refusal 1
		{at: 1 * s, retry: hour - s, calls: 3},                 // refusal 2: not banned
		{at: 2 * s, banned: true, retry: hour - 2*s, calls: 4}, // refusal 3 within 10 s: banned
		{at: 2 * s, banned: true, retry: time.Minute, calls: 4},
		{at: 62*s - 1, banned: true, retry: 1, calls: 4},
		{at: 62 * s, retry: hour - 62*s, calls: 5},               // the ban is over: refusal 1 afresh
		{at: 70 * s, retry: hour - 70*s, calls: 6},               // 2
		{at: 71 * s, banned: true, retry: hour - 71*s, calls: 7}, // 3 within 10 s
	})
	st := p.Stats()
	require.Equal(t, uint64(2), st.Bans)
	require.Equal(t, uint64(2), st.BanRefused)
}

func TestPenaltyCountsRefusalsWithinItsSpan(t *testing.T) {
	ban := keylimit.Ban{Refusals: 3, Within: 10 * s, For: time.Minute}
	p, inner, c := penaltyOn(t, keylimit.Per(1, 1000*time.Hour), ban)
	h := 1000 * time.Hour
	runPenaltySteps(t, p, inner, c, []penaltyStep{
		{at: 0, allowed: true, calls: 1},
		{at: 0, retry: h, calls: 2},
		{at: 5 * s, retry: h - 5*s, calls: 3},
		{at: 10 * s, retry: h - 10*s, calls: 4},                     // the 3rd latest came 10 s ago: not within
		{at: 20 * s, retry: h - 20*s, calls: 5},                     // 5 s, 10 s, 20 s: not within
		{at: 25 * s, retry: h - 25*s, calls: 6},                     // 10 s, 20 s, 25 s: 15 s
		{at: 29*s + 1, banned: true, retry: h - 29*s - 1, calls: 7}, // 20 s, 25 s, 29 s+1: within
	})
	require.Equal(t, uint64(1), p.Stats().Bans)
}

// A banned key asks nothing of the limiter, however often it asks.
func TestPenaltyAsksNoLimiterWhileBanned(t *testing.T) {
	ban := keylimit.Ban{Refusals: 1, Within: s, For: time.Hour}
	p, inner, c := penaltyOn(t, keylimit.PerMinute(1), ban)
	require.True(t, p.Allow("k"))
	r := p.Take("k", 1)
	require.True(t, r.Banned)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, int64(2), inner.calls.Load())
	for range 1000 {
		c.Add(time.Millisecond)
		require.False(t, p.Allow("k"))
		require.False(t, p.AllowN("k", 1))
		r, a := p.Admit("k", 1)
		require.True(t, r.Banned)
		require.Zero(t, a)
		r, err := p.TakeContext(context.Background(), "k", 1)
		require.NoError(t, err)
		require.True(t, r.Banned)
		require.True(t, p.Peek("k").Banned)
	}
	require.Equal(t, int64(2), inner.calls.Load(), "the limiter was asked while the key was banned")
	require.Equal(t, uint64(4000), p.Stats().BanRefused)
	// Another key is the limiter's.
	require.True(t, p.Allow("other"))
	require.Equal(t, int64(3), inner.calls.Load())
}

// A ban never loosens: with many goroutines on one key, the admissions are
// exactly the bucket's, and every request is either the limiter's or the
// ban's.
func TestPenaltyUnderConcurrentTakes(t *testing.T) {
	const burst, goroutines, each = 100, 32, 200
	ban := keylimit.Ban{Refusals: 5, Within: time.Minute, For: time.Hour}
	p, inner, _ := penaltyOn(t, keylimit.PerHour(burst), ban) // the mock clock stands still
	var admitted, bannedRefusals atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				r := p.Take("hot", 1)
				switch {
				case r.Allowed:
					admitted.Add(1)
				case r.Banned:
					bannedRefusals.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(burst), admitted.Load())
	st := p.Stats()
	require.Equal(t, uint64(1), st.Bans)
	require.Equal(t, int64(goroutines*each), inner.calls.Load()+int64(st.BanRefused),
		"every request is the limiter's or the ban's")
	// The limiter refused at least the 5 that started the ban; each of
	// those racing it was the limiter's refusal, counted, and no more.
	require.GreaterOrEqual(t, inner.calls.Load(), int64(burst+5))
	require.GreaterOrEqual(t, bannedRefusals.Load(), int64(st.BanRefused))
}

// The penalty keeps states for refused keys only, within its key cap, and
// forgets them once idle, so a flood of keys cannot grow it.
func TestPenaltyMemoryIsBounded(t *testing.T) {
	ban := keylimit.Ban{Refusals: 2, Within: 10 * s, For: time.Minute}
	p, _, c := penaltyOn(t, keylimit.PerHour(1), ban, keylimit.WithMaxKeys(100), keylimit.WithEvictionInterval(0), keylimit.WithLogger(slog.New(slog.DiscardHandler)))
	for i := range 10_000 {
		k := fmt.Sprint("flood-", i)
		p.Allow(k)
		p.Allow(k) // refused: a state
	}
	require.Equal(t, 100, p.Stats().Watched)
	// Admitted keys cost nothing.
	for i := range 1000 {
		require.True(t, p.Allow(fmt.Sprint("fresh-", i)))
	}
	require.Equal(t, 100, p.Stats().Watched)
	// Once the refusals have aged out, the cap makes room for new keys,
	// which can be banned.
	c.Add(10 * s)
	p.Allow("new")
	p.Allow("new")
	r := p.Take("new", 1)
	require.True(t, r.Banned, "%v", r)
	require.LessOrEqual(t, p.Stats().Watched, 100)
}

func TestPenaltyReset(t *testing.T) {
	ban := keylimit.Ban{Refusals: 1, Within: s, For: time.Hour}
	p, _, _ := penaltyOn(t, keylimit.PerHour(1), ban)
	p.Allow("k")
	require.True(t, p.Take("k", 1).Banned)
	p.Reset("k")
	require.True(t, p.Allow("k"), "Reset forgets the ban and the limiter's state")
	require.Zero(t, p.Stats().Watched)
}

// In All, a ban refuses the combination, and a refusal by another limiter
// gives back what the penalty's limiter took.
func TestPenaltyInAll(t *testing.T) {
	ban := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}
	p, inner, c := penaltyOn(t, keylimit.PerHour(10), ban)
	second, err := keylimit.NewTokenBucket[string](keylimit.PerHour(1), keylimit.WithClock(c))
	require.NoError(t, err)
	defer second.Close()
	both := keylimit.All[string](p, second)
	require.True(t, both.Allow("k"))
	require.False(t, both.Allow("k")) // the second refuses; the first gets its token back
	require.Equal(t, 9, p.Peek("k").Remaining)
	require.False(t, p.Peek("k").Banned, "the second's refusals are not the penalty's")

	solo := keylimit.All[string](p)
	for range 9 {
		require.True(t, solo.Allow("k"))
	}
	require.False(t, solo.Take("k", 1).Banned)
	r := both.Take("k", 1)
	require.True(t, r.Banned, "%v", r)
	calls := inner.calls.Load()
	require.True(t, both.Take("k", 1).Banned)
	require.Equal(t, calls, inner.calls.Load())
}

// TestPenaltyInAllAfterARemoteLimiter (issue 26): given after a remote
// limiter, an in-process Penalty is asked first, so a request both would
// refuse is the penalty's refusal, counted toward its ban, and asks the
// remote limiter nothing (asked first, it refused them all unseen).
func TestPenaltyInAllAfterARemoteLimiter(t *testing.T) {
	ban := keylimit.Ban{Refusals: 2, Within: time.Minute, For: time.Hour}
	p, _, c := penaltyOn(t, keylimit.PerHour(1), ban)
	rec := &remoteRecorder{TokenBucket: bucketsOn(t, keylimit.WithClock(c), keylimit.PerHour(1))[0]}
	lim := keylimit.All[string](rec, p)
	require.True(t, lim.Allow("k"))
	r := lim.Take("k", 1)
	require.False(t, r.Allowed)
	require.False(t, r.Banned, "one refusal")
	r = lim.Take("k", 1)
	require.True(t, r.Banned, "the penalty saw both refusals: %v", r)
	require.Equal(t, time.Hour, r.RetryAfter)
	require.Equal(t, uint64(1), p.Stats().Bans)
	require.Equal(t, 1, rec.calls, "the remote limiter's calls: the one admission")
}

func TestPenaltyWaitsOutItsBan(t *testing.T) {
	ban := keylimit.Ban{Refusals: 1, Within: s, For: time.Minute}
	p, _, c := penaltyOn(t, keylimit.PerSecond(1), ban)
	require.True(t, p.Allow("k"))
	require.True(t, p.Take("k", 1).Banned)

	ctx, cancel := c.WithTimeout(context.Background(), 30*s)
	defer cancel()
	err := p.Wait(ctx, "k")
	require.ErrorIs(t, err, keylimit.ErrWouldExceedDeadline)

	done := make(chan error, 1)
	go func() { done <- p.Wait(context.Background(), "k") }()
	start := c.Now()
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			require.GreaterOrEqual(t, c.Since(start), time.Minute-s, "the wait ended before the ban")
			require.Equal(t, uint64(1), p.Stats().Bans, "a wait is not a refusal")
			return
		default:
			c.Add(100 * time.Millisecond)
			runtime.Gosched()
		}
	}
}

func TestPenaltyRejectsBadBans(t *testing.T) {
	b, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(1))
	require.NoError(t, err)
	defer b.Close()
	for _, ban := range []keylimit.Ban{
		{Refusals: 0, Within: s, For: s},
		{Refusals: keylimit.MaxBanRefusals + 1, Within: s, For: s},
		{Refusals: 1, Within: 0, For: s},
		{Refusals: 1, Within: s, For: -1},
	} {
		_, err := keylimit.NewPenalty[string](b, ban)
		require.Error(t, err, "%+v", ban)
		require.Contains(t, err.Error(), "keylimit: ")
	}
	_, err = keylimit.NewPenalty[string](nil, keylimit.Ban{Refusals: 1, Within: s, For: s})
	require.Error(t, err)
	_, err = keylimit.NewPenalty[string](b, keylimit.Ban{Refusals: 1, Within: s, For: s}, keylimit.WithAdmitUntracked())
	require.Error(t, err)
}

// A context that has ended makes no decision.
func TestPenaltyEndedContext(t *testing.T) {
	p, inner, _ := penaltyOn(t, keylimit.PerSecond(1), keylimit.Ban{Refusals: 1, Within: s, For: s})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.TakeContext(ctx, "k", 1)
	require.True(t, errors.Is(err, context.Canceled))
	require.Zero(t, inner.calls.Load())
}

// A Penalty adds no allocation to a decision: not to an admission, a
// refusal by the limiter below the ban's count, or a ban's refusal.
func TestPenaltyAllocatesNothing(t *testing.T) {
	p, _, _ := penaltyOn(t, keylimit.PerHour(1_000_000), keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Hour})
	require.Zero(t, testing.AllocsPerRun(1000, func() { p.Allow("admitted") }), "an admission")
	q, _, _ := penaltyOn(t, keylimit.PerHour(1), keylimit.Ban{Refusals: 1, Within: time.Minute, For: time.Hour})
	q.Allow("k")
	require.True(t, q.Take("k", 1).Banned)
	require.Zero(t, testing.AllocsPerRun(1000, func() { q.Allow("k") }), "a ban's refusal")
	r, _, _ := penaltyOn(t, keylimit.PerHour(1), keylimit.Ban{Refusals: keylimit.MaxBanRefusals, Within: time.Nanosecond, For: time.Hour})
	r.Allow("k")
	r.Allow("k") // the key's state, made once
	require.Zero(t, testing.AllocsPerRun(1000, func() { r.Allow("k") }), "a counted refusal")
}

// A penalty whose ban never starts is its limiter: the behaviour suite
// passes through it (Take, Peek, Reset, Refund, Wait and the contention
// cases), for each limiter type. Its 30,000 attempts a case refuse fewer
// than MaxBanRefusals, and Within is a nanosecond.
func TestPenaltyBehaviour(t *testing.T) {
	never := keylimit.Ban{Refusals: keylimit.MaxBanRefusals, Within: time.Nanosecond, For: time.Hour}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var mock *clock.Mock
			limitertest.Run(t, limitertest.Harness{
				New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
					mock = clock.NewMock()
					inner, err := k.new(l, keylimit.WithClock(mock))
					if err != nil {
						return nil, err
					}
					t.Cleanup(func() { inner.Close() })
					return keylimit.NewPenalty[string](inner, never)
				},
				Advance:     func(d time.Duration) { mock.Add(d) },
				MaxEvents:   k.maxEvents,
				Approximate: k == slidingCounter,
			})
		})
	}
}
