package redislimit_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestRedisKilledAndRestarted kills redis-server (SIGKILL) under a limiter,
// checks that the failure policy answers while it is down, starts it again
// on the same port, and checks that decisions are exact again: the quota,
// no more, no less, all made by Redis.
func TestRedisKilledAndRestarted(t *testing.T) {
	t.Parallel() // each case on a server of its own
	for _, c := range []struct {
		typ    string
		policy redislimit.FailurePolicy
		// The answers to 20 Take(1) calls while Redis is down: how many were
		// admitted, and the last.
		admitted int
		last     keylimit.Result
	}{
		{"TokenBucket", redislimit.FailOpen(), 20, keylimit.Result{Allowed: true, Limit: 10, Remaining: 9}},
		// RetryAfter: the interval of 10 an hour.
		{"TokenBucket", redislimit.FailClosed(), 0, keylimit.Result{Limit: 10, RetryAfter: 6 * time.Minute, ResetAfter: 6 * time.Minute, RefillAfter: 6 * time.Minute}},
		// Exactly half the quota of 10, in a limiter of the same type, on
		// the mock clock at the Unix epoch.
		{"TokenBucket", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: 12 * time.Minute, ResetAfter: time.Hour, RefillAfter: 12 * time.Minute}},
		{"FixedWindow", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: time.Hour, ResetAfter: time.Hour, RefillAfter: time.Hour}},
		{"SlidingWindow", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: time.Hour, ResetAfter: time.Hour, RefillAfter: time.Hour}},
	} {
		t.Run(c.typ+"/"+c.policy.String(), func(t *testing.T) {
			t.Parallel() // each on a server of its own
			newLim := typeNamed(c.typ)
			s := newServer(t)
			mock := clock.NewMock() // local time: the backoff and the fallback run on it
			var errs errorLog
			lim, err := newLim(quickClient(t, s), keylimit.PerHour(10),
				redislimit.WithTimeout(patient), keylimit.WithClock(mock),
				redislimit.WithFailurePolicy(c.policy), redislimit.WithOnError(errs.add))
			require.NoError(t, err)
			require.True(t, lim.AllowN("before", 10), "with Redis up: 10 of 10")
			require.False(t, lim.Allow("before"), "with Redis up: the 11th")

			s.Kill()
			admitted, last := 0, keylimit.Result{}
			for range 20 {
				if last = lim.Take("down", 1); last.Allowed {
					admitted++
				}
			}
			require.Equal(t, c.admitted, admitted, "%s: admitted of 20", c.policy)
			require.Equal(t, c.last, last, "%s: the last Result", c.policy)
			// The first failure went to OnError; the backoff spared Redis
			// (and the caller) the other 19 attempts.
			require.Equal(t, 1, errs.len(), "OnError calls during the outage (then the backoff)")
			var rerr *redislimit.Error
			require.ErrorAs(t, errs.list()[0], &rerr)
			require.Equal(t, "take", rerr.Op)
			require.Equal(t, "down", rerr.Key)
			_, err = lim.(interface {
				TakeContext(context.Context, string, int) (keylimit.Result, error)
			}).TakeContext(context.Background(), "down", 1)
			require.ErrorIs(t, err, redislimit.ErrUnavailable, "TakeContext during the backoff")

			require.NoError(t, s.Restart()) // the same port: the client reconnects
			mock.Add(redislimit.DefaultFailureBackoff)
			r := lim.Peek("after")
			require.True(t, r.Allowed, "Peek once Redis is back: %+v", r)
			require.Equal(t, 10, r.Remaining, "Peek once Redis is back: %+v", r)
			errsBefore := errs.len()
			admitted = 0
			for range 30 {
				if lim.Allow("after") {
					admitted++
				}
			}
			require.Equal(t, 10, admitted, "once Redis is back: admitted of 30")
			require.Equal(t, errsBefore, errs.len(), "once Redis is back: OnError calls")
		})
	}
}

// TestStalledRedisTimesOut: a Redis that accepts connections but never
// answers (SIGSTOP) holds a decision only until the timeout, here 250 ms;
// the policy answers and the error says the deadline passed. (The client's
// own read timeout, 5 s, plays no part.)
func TestStalledRedisTimesOut(t *testing.T) {
	t.Parallel() // its own server; most of it is waiting out the timeout
	s := newServer(t)
	client := s.client(t)
	// A patient limiter on the same client makes the connection and loads
	// the script while Redis answers, so that the short timeout below is
	// spent on nothing but the stalled call.
	warm, err := redislimit.NewTokenBucket(client, "test", keylimit.PerHour(10), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	var errs errorLog
	lim, err := redislimit.NewTokenBucket(client, "test", keylimit.PerHour(10),
		redislimit.WithTimeout(250*time.Millisecond), redislimit.WithFailurePolicy(redislimit.FailClosed()),
		redislimit.WithOnError(errs.add))
	require.NoError(t, err)
	r, err := warm.TakeContext(context.Background(), "k", 1)
	require.NoError(t, err, "Take with Redis up")
	require.True(t, r.Allowed, "Take with Redis up")
	require.NoError(t, s.Process().Signal(syscall.SIGSTOP))
	defer s.Process().Signal(syscall.SIGCONT)
	start := time.Now()
	r, err = lim.TakeContext(context.Background(), "k", 1)
	// Not a speed test: a bound above the timeout and below the client's
	// own 5 s, that only a call ignoring its deadline would break.
	require.Less(t, time.Since(start), 4*time.Second, "a decision on a stalled Redis, with a timeout of 250ms")
	require.False(t, r.Allowed, "on a stalled Redis, fail closed")
	require.ErrorIs(t, err, context.DeadlineExceeded, "on a stalled Redis")
	require.Equal(t, 1, errs.len(), "OnError calls")
}

// TestContextCancelledDuringTheCallIsAbandoned: a request cancelled while
// Redis is stalled is abandoned when the call returns (at the limiter's
// timeout here: go-redis stops a call at a deadline, not at a cancel):
// refused, with the cancel as its error, and no failure policy decides it
// (FailOpen would admit it, FailLocal take from its share); nothing counts
// as a fallback.
func TestContextCancelledDuringTheCallIsAbandoned(t *testing.T) {
	t.Parallel() // its own server, stopped
	s := newServer(t)
	client := s.client(t)
	policies := []redislimit.FailurePolicy{redislimit.FailOpen(), redislimit.FailLocal(1), redislimit.FailClosed()}
	lims := make([]*redislimit.TokenBucket, len(policies))
	for i, p := range policies {
		lim, err := redislimit.NewTokenBucket(client, "test", keylimit.PerHour(10),
			redislimit.WithTimeout(300*time.Millisecond), redislimit.WithFailurePolicy(p))
		require.NoError(t, err)
		r, err := lim.TakeContext(context.Background(), "k", 1) // loads the script while Redis answers
		require.NoError(t, err)
		require.True(t, r.Allowed)
		lims[i] = lim
	}
	require.NoError(t, s.Process().Signal(syscall.SIGSTOP))
	defer s.Process().Signal(syscall.SIGCONT)
	for i, lim := range lims {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		r, err := lim.TakeContext(ctx, "k", 1)
		require.False(t, r.Allowed, "%v: abandoned, not decided by the policy", policies[i])
		require.ErrorIs(t, err, context.Canceled, "%v", policies[i])
		require.Zero(t, lim.Stats().Fallbacks, "%v: fallbacks", policies[i])
	}
}

// TestErrorReplyDoesNotStartTheBackoff: an error reply means Redis is up
// (here, the key holds a value of another type), so only that call is
// answered by the policy, and the next key goes to Redis.
func TestErrorReplyDoesNotStartTheBackoff(t *testing.T) {
	c := shared.client(t)
	var errs errorLog
	lim, err := redislimit.NewFixedWindow(c, "test", keylimit.PerHour(10), redislimit.WithPrefix(testKey(t, "p")+":"),
		redislimit.WithTimeout(patient), redislimit.WithFailurePolicy(redislimit.FailClosed()), redislimit.WithOnError(errs.add))
	require.NoError(t, err)
	require.NoError(t, c.Set(context.Background(), lim.StateKey("clobbered"), "not a hash", time.Minute).Err())
	r, err := lim.TakeContext(context.Background(), "clobbered", 1)
	require.ErrorContains(t, err, "WRONGTYPE", "Take on a key of another type")
	require.False(t, r.Allowed, "Take on a key of another type")
	r, err = lim.TakeContext(context.Background(), "fine", 1)
	require.NoError(t, err, "Take on another key right after")
	require.True(t, r.Allowed, "Take on another key right after, by Redis")
}

// TestScriptErrorIsNoOutage (issue 37.5): a script that fails on the
// server (here on a state it cannot read: a bug's effect) is no outage.
// Under FailOpen, which would admit, the request is refused, and the error
// reaches the caller as ErrScript (in the Result's Err too), the OnError
// callback, Stats' ScriptErrors (not Errors, not Fallbacks), and one line
// at Error level per quiet period; no "Redis failed" line, no backoff: the
// next key goes to Redis. A joined call fails alike.
func TestScriptErrorIsNoOutage(t *testing.T) {
	c := shared.client(t)
	ctx := context.Background()
	var errs errorLog
	rec, logger := newLogRecorder(slog.LevelInfo)
	opts := []redislimit.Option{redislimit.WithPrefix(testKey(t, "p") + ":"), redislimit.WithTimeout(patient),
		redislimit.WithFailurePolicy(redislimit.FailOpen()), redislimit.WithOnError(errs.add), keylimit.WithLogger(logger)}
	lim, err := redislimit.NewTokenBucket(c, "script", keylimit.PerSecond(10), opts...)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, lim.StateKey("garbled"), "not a time", time.Minute).Err())

	r, err := lim.TakeContext(ctx, "garbled", 1)
	require.ErrorIs(t, err, redislimit.ErrScript)
	var re *redislimit.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, "take", re.Op)
	require.False(t, r.Allowed, "refused, though the policy is FailOpen")
	require.ErrorIs(t, r.Err, redislimit.ErrScript)
	require.False(t, lim.Allow("garbled"), "Allow fails closed")
	r, err = lim.PeekContext(ctx, "garbled")
	require.ErrorIs(t, err, redislimit.ErrScript)
	require.False(t, r.Allowed, "Peek")
	require.True(t, lim.Allow("fine"), "another key, by Redis: no backoff")

	st := lim.Stats()
	require.Equal(t, [4]uint64{4, 3, 0, 0}, [4]uint64{st.Calls, st.ScriptErrors, st.Errors, st.Fallbacks},
		"Calls, ScriptErrors, Errors, Fallbacks")
	require.Equal(t, 3, errs.len(), "errors passed to OnError")
	for _, e := range errs.list() {
		require.ErrorIs(t, e, redislimit.ErrScript)
	}
	lines := rec.logged("the script failed on the server")
	require.Len(t, lines, 1, "script errors logged within a quiet period")
	require.Equal(t, slog.LevelError, lines[0].Level)
	require.Empty(t, rec.logged("Redis failed"), "no outage logged")

	window, err := redislimit.NewFixedWindow(c, "script-w", keylimit.PerHour(10), opts...)
	require.NoError(t, err)
	both := keylimit.All[string](window, lim)
	r = both.Take("garbled", 1)
	require.False(t, r.Allowed, "joined")
	require.ErrorIs(t, r.Err, redislimit.ErrScript, "joined")
	require.Equal(t, 10, window.Peek("garbled").Remaining, "the joined call took nothing")
}

// TestKillUnderLoad kills and restarts redis-server while goroutines keep
// deciding on it: nothing panics or races, the errors reach OnError, and
// once Redis is back (and the backoff over) decisions are exact again.
func TestKillUnderLoad(t *testing.T) {
	t.Parallel() // with the other tests that sleep on real time
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
			t.Parallel() // each on a server of its own
			s := newServer(t)
			var errs errorLog
			lim, err := typ.new(quickClient(t, s), keylimit.PerSecond(100),
				redislimit.WithTimeout(patient), redislimit.WithFailureBackoff(20*time.Millisecond),
				redislimit.WithFailurePolicy(redislimit.FailClosed()), redislimit.WithOnError(errs.add))
			require.NoError(t, err)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						lim.Take(testKey(t, "load"), 1+(g+i)%3)
						lim.Allow("hot")
					}
				})
			}
			time.Sleep(50 * time.Millisecond)
			s.Kill()
			time.Sleep(100 * time.Millisecond)
			err = s.Restart()
			if err != nil {
				close(stop)
				wg.Wait()
			}
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()
			require.NotZero(t, errs.len(), "errors that reached OnError while Redis was down")
			waitUntilBack(t, lim)
			errsBefore := errs.len()
			key := testKey(t, "after")
			admitted := 0
			took := timed(func() {
				for range 150 {
					if lim.Allow(key) {
						admitted++
					}
				}
			})
			// 100 at once; then a bucket refills one every 10 ms, and a fixed
			// window starts afresh each second (a sliding log lets nothing
			// leave within a second).
			most := 100 + int(took.end.Sub(took.start)/(10*time.Millisecond)) + 1
			if typ.name == "FixedWindow" {
				most = 100 * int(took.end.Unix()-took.start.Unix()+1)
			}
			require.Empty(t, errs.list()[errsBefore:], "errors once Redis is back")
			require.True(t, admitted >= 100 && admitted <= most, "once Redis is back: admitted %d of 150 in %v, want 100 to %d",
				admitted, took.end.Sub(took.start), most)
		})
	}
}

// TestFailLocalShare: under FailLocal(4), a request within the fleet's
// quota but above the instance's share is refused while Redis is down, but
// not as "never" (InfDuration): it can pass once Redis is back, so it is
// told to retry after the backoff or the limit's interval, the later.
func TestFailLocalShare(t *testing.T) {
	client := deadClient(t)
	lim, err := redislimit.NewTokenBucket(client, "test", keylimit.PerMinute(10),
		redislimit.WithFailurePolicy(redislimit.FailLocal(4)), keylimit.WithClock(clock.NewMock()))
	require.NoError(t, err)
	r := lim.Take("k", 3)
	require.False(t, r.Allowed, "Take(3) with a local share of 2")
	require.Equal(t, 6*time.Second, r.RetryAfter, "Take(3) with a local share of 2: the interval, > the backoff")
	r = lim.Take("k", 2)
	require.True(t, r.Allowed, "Take(2) with a local share of 2, by the fallback")
	require.Equal(t, 2, r.Limit, "Take(2) with a local share of 2")
	require.Equal(t, keylimit.InfDuration, lim.Take("k", 11).RetryAfter, "Take(11) on a quota of 10")
}

// TestFailLocalKeyShare: under FailLocal(2) the fallback gives each key
// its share of its own limit, from SetKeyLimit right after the constructor,
// before Redis failed, and again after another SetKeyLimit.
func TestFailLocalKeyShare(t *testing.T) {
	lim, err := redislimit.NewTokenBucket(deadClient(t), "test", keylimit.PerMinute(10),
		redislimit.WithFailurePolicy(redislimit.FailLocal(2)), keylimit.WithClock(clock.NewMock()))
	require.NoError(t, err)
	require.NoError(t, lim.SetKeyLimit(func(key string) keylimit.Limit {
		if key == "gold" {
			return keylimit.PerMinute(40)
		}
		return keylimit.Limit{}
	}))
	admitted := func(key string) int {
		n := 0
		for range 50 {
			if lim.Allow(key) {
				n++
			}
		}
		return n
	}
	require.Equal(t, 20, admitted("gold"), "gold: half of its 40")
	require.Equal(t, 5, admitted("free"), "free: half of the limiter's 10")
	require.NoError(t, lim.SetKeyLimit(func(key string) keylimit.Limit {
		if key == "silver" {
			return keylimit.PerMinute(20)
		}
		return keylimit.Limit{}
	}))
	require.Equal(t, 10, admitted("silver"), "silver: half of its 20, after SetKeyLimit")
	require.Equal(t, 0, admitted("gold"), "gold: its 20 used count against the limiter's share of 5")
}

// TestResetIgnoresTheBackoff: a Reset during the failure backoff still goes
// to Redis, so that a Reset made just as Redis comes back is not lost; a
// Reset that fails is reported to WithOnError, as a *Error of Op "reset".
func TestResetIgnoresTheBackoff(t *testing.T) {
	s := newServer(t)
	mock := clock.NewMock()
	var errs []error // WithOnError runs on the caller's goroutine: this one
	lim, err := redislimit.NewTokenBucket(quickClient(t, s), "test", keylimit.PerHour(2),
		redislimit.WithTimeout(patient), keylimit.WithClock(mock), redislimit.WithFailurePolicy(redislimit.FailClosed()),
		redislimit.WithOnError(func(err error) { errs = append(errs, err) }))
	require.NoError(t, err)
	lim.AllowN("k", 2)
	s.Kill()
	require.False(t, lim.Allow("other"), "fail closed, Redis down")
	before := lim.Stats().Errors
	lim.Reset("k")
	require.Equal(t, before+1, lim.Stats().Errors, "Errors after a Reset with Redis down")
	var rerr *redislimit.Error
	require.ErrorAs(t, errs[len(errs)-1], &rerr, "the error WithOnError saw last")
	require.Equal(t, "reset", rerr.Op)
	require.Equal(t, "k", rerr.Key)
	require.NoError(t, s.Restart())
	lim.AllowN("k", 2) // the backoff: answered by the policy, not Redis
	dels := s.commandStats(t)["del"]
	errs = nil
	lim.Reset("k")
	require.Empty(t, errs, "errors of Reset during the backoff")
	require.Equal(t, int64(1), s.commandStats(t)["del"]-dels, "DELs of Reset during the backoff")
}

// TestBackoffSaturates pins issue 24.5: WithFailureBackoff(math.MaxInt64)
// was accepted, and the end of the backoff (now + backoff) wrapped negative,
// so Redis was asked on 190 of 190 calls after a failure. It saturates now,
// and so does local time: a backoff that long asks Redis once, and so does
// an hour's on a clock 292 years past the limiter's creation.
func TestBackoffSaturates(t *testing.T) {
	for _, c := range []struct {
		name    string
		backoff time.Duration
		later   time.Duration // how far the clock moves after the limiter's creation
	}{{"MaxBackoff", math.MaxInt64, time.Second}, {"FarClock", time.Hour, math.MaxInt64 - time.Minute}} {
		t.Run(c.name, func(t *testing.T) {
			client := shared.client(t)
			f := addFaults(client)
			mock := clock.NewMock()
			lim, err := redislimit.NewTokenBucket(client, "test", keylimit.PerHour(10), keylimit.WithClock(mock),
				redislimit.WithFailureBackoff(c.backoff), redislimit.WithFailurePolicy(redislimit.FailClosed()))
			require.NoError(t, err)
			mock.Add(c.later)
			key := testKey(t, "k")
			require.True(t, lim.Allow(key), "with Redis up")
			f.on.Store(true)
			before := lim.Stats().Calls
			for range 190 {
				require.False(t, lim.Allow(key), "fail closed, Redis failing")
			}
			asked := lim.Stats().Calls - before
			t.Logf("backoff %v, clock %v on: Redis asked on %d of 190 calls after a failure", c.backoff, c.later, asked)
			require.EqualValues(t, 1, asked, "calls that asked Redis")
		})
	}
}

// TestBackoffGrowsWithFailuresInARow: the first failure after Redis
// answered keeps Redis unasked for a sixteenth of the backoff, the second
// in a row for a quarter, the third and later for all of it; an answer
// starts the count afresh. (A fixed backoff left a fleet of 100 under the
// default policy, one call in 2,000 timing out, at 1.20 times its bound:
// each timeout gave an instance a second of deciding by its share, beside
// the others on Redis; BenchmarkFleetOutage/default/sporadic.)
func TestBackoffGrowsWithFailuresInARow(t *testing.T) {
	client := shared.client(t)
	f := addFaults(client)
	mock := clock.NewMock()
	const backoff = 1600 * time.Millisecond
	lim, err := redislimit.NewTokenBucket(client, "test", keylimit.PerHour(1000), keylimit.WithClock(mock),
		redislimit.WithFailureBackoff(backoff), redislimit.WithFailurePolicy(redislimit.FailClosed()))
	require.NoError(t, err)
	key := testKey(t, "k")
	calls := func() uint64 { return lim.Stats().Calls }
	// asksAfter moves the clock to just before d has passed since the last
	// failure (no call asks Redis), then to d (one does).
	asksAfter := func(d time.Duration, what string) {
		t.Helper()
		before := calls()
		mock.Add(d - time.Millisecond)
		lim.Allow(key)
		require.Equal(t, before, calls(), "%s: Redis asked before %v", what, d)
		mock.Add(time.Millisecond)
		lim.Allow(key)
		require.Equal(t, before+1, calls(), "%s: Redis not asked once %v had passed", what, d)
	}
	require.True(t, lim.Allow(key), "with Redis up")
	f.on.Store(true)
	before := calls()
	require.False(t, lim.Allow(key), "the first failure")
	require.Equal(t, before+1, calls())
	asksAfter(backoff/16, "after the first failure")
	asksAfter(backoff/4, "after the second in a row")
	asksAfter(backoff, "after the third")
	asksAfter(backoff, "after the fourth")
	f.on.Store(false)
	mock.Add(backoff)
	require.True(t, lim.Allow(key), "Redis answers again")
	f.on.Store(true)
	require.False(t, lim.Allow(key), "a failure after the answer")
	asksAfter(backoff/16, "after a failure that follows an answer")
}

// TestFailLocalUsesTheSameAlgorithm: while Redis is down, each window falls
// back to keylimit's window of the same kind, not a bucket: with 2 a minute
// on a mock clock, half a minute after two admissions a bucket would have a
// token again, and neither window does. Quotas above what a window takes in
// memory still get a fallback.
func TestFailLocalUsesTheSameAlgorithm(t *testing.T) {
	client := deadClient(t)
	for _, typ := range types[1:] {
		t.Run(typ.name, func(t *testing.T) {
			mock := clock.NewMock() // at the Unix epoch: a minute window starts now
			lim, err := typ.new(client, keylimit.PerMinute(2), keylimit.WithClock(mock),
				redislimit.WithFailureBackoff(time.Hour))
			require.NoError(t, err)
			require.True(t, lim.AllowN("k", 2), "the fallback: 2 of 2 a minute")
			mock.Add(30 * time.Second)
			require.False(t, lim.Allow("k"), "the fallback: a third within the minute, as a bucket would admit")
			mock.Add(30 * time.Second)
			require.True(t, lim.Allow("k"), "the fallback, once the minute has passed")
			big, err := typ.new(client, keylimit.PerSecond(1_000_000), keylimit.WithClock(mock))
			require.NoError(t, err, "a quota of a million a second, above what the in-memory windows take")
			require.True(t, big.AllowN("k", 1000), "the fallback for a quota of a million: 1000")
		})
	}
}

// TestErrorQuotesABoundedKey: an Error quotes at most 64 runes of its key,
// which may come from a request, so that a 10 KB key does not become a
// 10 KB log line in every WithOnError call.
func TestErrorQuotesABoundedKey(t *testing.T) {
	e := &redislimit.Error{Op: "take", Key: strings.Repeat("k", 10_000), Err: context.Canceled}
	require.Equal(t, `redislimit: take "`+strings.Repeat("k", 64)+`": context canceled`, e.Error())
	require.Equal(t, `redislimit: take "mia": context canceled`, (&redislimit.Error{Op: "take", Key: "mia", Err: context.Canceled}).Error())
}
