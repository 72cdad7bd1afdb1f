package redislimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
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
		{"TokenBucket", redislimit.FailClosed(), 0, keylimit.Result{Limit: 10, RetryAfter: 6 * time.Minute, ResetAfter: 6 * time.Minute}},
		// Exactly half the quota of 10, in a limiter of the same type, on
		// the mock clock at the Unix epoch.
		{"TokenBucket", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: 12 * time.Minute, ResetAfter: time.Hour}},
		{"FixedWindow", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: time.Hour, ResetAfter: time.Hour}},
		{"SlidingWindow", redislimit.FailLocal(2), 5, keylimit.Result{Limit: 5, RetryAfter: time.Hour, ResetAfter: time.Hour}},
	} {
		t.Run(c.typ+"/"+c.policy.String(), func(t *testing.T) {
			t.Parallel() // each on a server of its own
			newLim := typeNamed(c.typ)
			s := newServer(t)
			mock := clock.NewMock() // local time: the backoff and the fallback run on it
			var errs errorLog
			lim, err := newLim(quickClient(t, s), keylimit.PerHour(10),
				redislimit.WithTimeout(patient), redislimit.WithClock(mock),
				redislimit.WithFailurePolicy(c.policy), redislimit.WithOnError(errs.add))
			if err != nil {
				t.Fatal(err)
			}
			if !lim.AllowN("before", 10) || lim.Allow("before") {
				t.Fatal("with Redis up: the quota of 10 was not admitted exactly")
			}

			s.Kill()
			admitted, last := 0, keylimit.Result{}
			for range 20 {
				if last = lim.Take("down", 1); last.Allowed {
					admitted++
				}
			}
			if admitted != c.admitted || last != c.last {
				t.Fatalf("%s: admitted %d of 20, the last %+v; want %d, the last %+v", c.policy, admitted, last, c.admitted, c.last)
			}
			// The first failure went to OnError; the backoff spared Redis
			// (and the caller) the other 19 attempts.
			if n := errs.len(); n != 1 {
				t.Fatalf("OnError was called %d times during the outage, want 1 (then the backoff)", n)
			}
			var rerr *redislimit.Error
			if !errors.As(errs.list()[0], &rerr) || rerr.Op != "take" || rerr.Key != "down" {
				t.Fatalf("OnError got %v, want a *redislimit.Error for take \"down\"", errs.list()[0])
			}
			if _, err := lim.(interface {
				TakeContext(context.Context, string, int) (keylimit.Result, error)
			}).TakeContext(context.Background(), "down", 1); !errors.Is(err, redislimit.ErrUnavailable) {
				t.Fatalf("TakeContext during the backoff: error %v, want ErrUnavailable", err)
			}

			if err := s.Restart(); err != nil { // the same port: the client reconnects
				t.Fatal(err)
			}
			mock.Add(redislimit.DefaultFailureBackoff)
			if r := lim.Peek("after"); !r.Allowed || r.Remaining != 10 {
				t.Fatalf("Peek once Redis is back: %+v", r)
			}
			errsBefore := errs.len()
			admitted = 0
			for range 30 {
				if lim.Allow("after") {
					admitted++
				}
			}
			if admitted != 10 || errs.len() != errsBefore {
				t.Fatalf("once Redis is back: admitted %d of 30 with %d errors, want exactly 10 and none",
					admitted, errs.len()-errsBefore)
			}
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
	warm, err := redislimit.NewTokenBucket(client, keylimit.PerHour(10), redislimit.WithTimeout(patient))
	if err != nil {
		t.Fatal(err)
	}
	var errs errorLog
	lim, err := redislimit.NewTokenBucket(client, keylimit.PerHour(10),
		redislimit.WithTimeout(250*time.Millisecond), redislimit.WithFailurePolicy(redislimit.FailClosed()),
		redislimit.WithOnError(errs.add))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := warm.TakeContext(context.Background(), "k", 1); !r.Allowed || err != nil {
		t.Fatalf("Take with Redis up: %+v, %v", r, err)
	}
	if err := s.Process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s.Process().Signal(syscall.SIGCONT)
	start := time.Now()
	r, err := lim.TakeContext(context.Background(), "k", 1)
	// Not a speed test: a bound above the timeout and below the client's
	// own 5 s, that only a call ignoring its deadline would break.
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("a decision on a stalled Redis took %v with a timeout of 250ms", took)
	}
	if r.Allowed || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("on a stalled Redis: %+v, %v; want refused (fail closed) and a deadline error", r, err)
	}
	if errs.len() != 1 {
		t.Fatalf("OnError was called %d times, want 1", errs.len())
	}
}

// TestErrorReplyDoesNotStartTheBackoff: an error reply means Redis is up
// (here, the key holds a value of another type), so only that call is
// answered by the policy, and the next key goes to Redis.
func TestErrorReplyDoesNotStartTheBackoff(t *testing.T) {
	c := shared.client(t)
	var errs errorLog
	lim, err := redislimit.NewFixedWindow(c, keylimit.PerHour(10), redislimit.WithPrefix(testKey(t, "p")+":"),
		redislimit.WithTimeout(patient), redislimit.WithFailurePolicy(redislimit.FailClosed()), redislimit.WithOnError(errs.add))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(context.Background(), lim.Prefix()+"clobbered", "not a hash", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := lim.TakeContext(context.Background(), "clobbered", 1)
	if r.Allowed || err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Take on a key of another type: %+v, %v; want refused with a WRONGTYPE error", r, err)
	}
	if r, err := lim.TakeContext(context.Background(), "fine", 1); !r.Allowed || err != nil {
		t.Fatalf("Take on another key right after: %+v, %v; want allowed by Redis", r, err)
	}
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
			if err != nil {
				t.Fatal(err)
			}
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
			if err := s.Restart(); err != nil {
				close(stop)
				wg.Wait()
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()
			if errs.len() == 0 {
				t.Fatal("no error reached OnError while Redis was down")
			}
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
			if admitted < 100 || admitted > most || errs.len() != errsBefore {
				t.Fatalf("once Redis is back: admitted %d of 150 in %v with errors %v, want 100 to %d and none",
					admitted, took.end.Sub(took.start), errs.list()[errsBefore:], most)
			}
		})
	}
}

// TestFailLocalShare: under FailLocal(4), a request within the fleet's
// quota but above the instance's share is refused while Redis is down, but
// not as "never" (InfDuration): it can pass once Redis is back, so it is
// told to retry after the backoff or the limit's interval, the later.
func TestFailLocalShare(t *testing.T) {
	client := deadClient(t)
	lim, err := redislimit.NewTokenBucket(client, keylimit.PerMinute(10),
		redislimit.WithFailurePolicy(redislimit.FailLocal(4)), redislimit.WithClock(clock.NewMock()))
	if err != nil {
		t.Fatal(err)
	}
	if r := lim.Take("k", 3); r.Allowed || r.RetryAfter != 6*time.Second {
		t.Fatalf("Take(3) with a local share of 2: %+v, want refused with RetryAfter 6s (the interval, > the backoff)", r)
	}
	if r := lim.Take("k", 2); !r.Allowed || r.Limit != 2 {
		t.Fatalf("Take(2) with a local share of 2: %+v, want allowed by the fallback, Limit 2", r)
	}
	if r := lim.Take("k", 11); r.RetryAfter != keylimit.InfDuration {
		t.Fatalf("Take(11) on a quota of 10: %+v, want RetryAfter InfDuration", r)
	}
}

// TestResetIgnoresTheBackoff: a Reset during the failure backoff still goes
// to Redis, so that a Reset made just as Redis comes back is not lost.
func TestResetIgnoresTheBackoff(t *testing.T) {
	s := newServer(t)
	mock := clock.NewMock()
	lim, err := redislimit.NewTokenBucket(quickClient(t, s), keylimit.PerHour(2),
		redislimit.WithTimeout(patient), redislimit.WithClock(mock), redislimit.WithFailurePolicy(redislimit.FailClosed()))
	if err != nil {
		t.Fatal(err)
	}
	lim.AllowN("k", 2)
	s.Kill()
	if lim.Allow("other") {
		t.Fatal("fail closed admitted while Redis was down")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	lim.AllowN("k", 2) // the backoff: answered by the policy, not Redis
	dels := s.commandStats(t)["del"]
	if err := lim.ResetContext(context.Background(), "k"); err != nil {
		t.Fatalf("ResetContext during the backoff: %v", err)
	}
	if n := s.commandStats(t)["del"] - dels; n != 1 {
		t.Fatalf("ResetContext during the backoff ran %d DELs, want 1", n)
	}
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
			lim, err := typ.new(client, keylimit.PerMinute(2), redislimit.WithClock(mock),
				redislimit.WithFailureBackoff(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !lim.AllowN("k", 2) {
				t.Fatal("the fallback refused the first 2 of 2 a minute")
			}
			mock.Add(30 * time.Second)
			if lim.Allow("k") {
				t.Fatal("the fallback admitted a third event within the minute, as a bucket would")
			}
			mock.Add(30 * time.Second)
			if !lim.Allow("k") {
				t.Fatal("the fallback refused once the minute had passed")
			}
			big, err := typ.new(client, keylimit.PerSecond(1_000_000), redislimit.WithClock(mock))
			if err != nil {
				t.Fatalf("a quota of a million a second, above what the in-memory windows take: %v", err)
			}
			if !big.AllowN("k", 1000) {
				t.Fatal("the fallback for a quota of a million refused 1000")
			}
		})
	}
}
