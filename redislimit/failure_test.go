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
	"github.com/redis/go-redis/v9"
)

// errorLog collects what WithOnError reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// quickClient is a client that gives up on a dead server at once (no
// retries), so that a test of an outage does not wait out its timeouts.
func quickClient(t *testing.T, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisKilledAndRestarted kills redis-server (SIGKILL) under a limiter,
// checks that the failure policy answers while it is down, starts it again
// on the same port, and checks that decisions are exact again: the quota,
// no more, no less, all made by Redis.
func TestRedisKilledAndRestarted(t *testing.T) {
	cases := []struct {
		typ    string
		policy redislimit.FailurePolicy
		// whileDown checks the answers to 20 Allow calls while Redis is down.
		whileDown func(t *testing.T, admitted int, r keylimit.Result)
	}{
		{"TokenBucket", redislimit.FailOpen(), func(t *testing.T, admitted int, r keylimit.Result) {
			if admitted != 20 || !r.Allowed || r.Remaining != 9 {
				t.Fatalf("fail open: admitted %d of 20, last %+v; want all, Remaining 9", admitted, r)
			}
		}},
		{"TokenBucket", redislimit.FailClosed(), func(t *testing.T, admitted int, r keylimit.Result) {
			if admitted != 0 || r.Allowed || r.RetryAfter != 6*time.Minute {
				t.Fatalf("fail closed: admitted %d of 20, last %+v; want none, RetryAfter 6m (the interval)", admitted, r)
			}
		}},
	}
	for _, typ := range types {
		cases = append(cases, struct {
			typ       string
			policy    redislimit.FailurePolicy
			whileDown func(t *testing.T, admitted int, r keylimit.Result)
		}{typ.name, redislimit.FailLocal(2), func(t *testing.T, admitted int, r keylimit.Result) {
			if admitted != 5 || r.Allowed {
				t.Fatalf("fail local/2: admitted %d of 20, last %+v; want exactly 5, half the quota of 10", admitted, r)
			}
		}})
	}
	for _, c := range cases {
		t.Run(c.typ+"/"+c.policy.String(), func(t *testing.T) {
			var newLim newFunc
			for _, typ := range types {
				if typ.name == c.typ {
					newLim = typ.new
				}
			}
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
			c.whileDown(t, admitted, last)
			// The first failure went to OnError; the backoff spared Redis
			// (and the caller) the other 19 attempts.
			if n := errs.len(); n != 1 {
				t.Fatalf("OnError was called %d times during the outage, want 1 (then the backoff)", n)
			}
			var rerr *redislimit.Error
			if !errors.As(errs.errs[0], &rerr) || rerr.Op != "take" || rerr.Key != "down" {
				t.Fatalf("OnError got %v, want a *redislimit.Error for take \"down\"", errs.errs[0])
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
// answers (SIGSTOP) holds a decision only until the timeout; the policy
// answers and the error says the deadline passed. (The client's own read
// timeout, 5 s, plays no part.)
func TestStalledRedisTimesOut(t *testing.T) {
	s := newServer(t)
	var errs errorLog
	lim, err := redislimit.NewTokenBucket(s.client(t), keylimit.PerHour(10),
		redislimit.WithTimeout(time.Second), redislimit.WithFailurePolicy(redislimit.FailClosed()),
		redislimit.WithOnError(errs.add))
	if err != nil {
		t.Fatal(err)
	}
	if !lim.Allow("k") {
		t.Fatalf("Allow with Redis up was refused: %v", errs.errs)
	}
	if err := s.Process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer s.Process().Signal(syscall.SIGCONT)
	start := time.Now()
	r, err := lim.TakeContext(context.Background(), "k", 1)
	// Not a speed test: a bound above the timeout of 1 s and below the
	// client's own 5 s, that only a call ignoring its deadline would break.
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("a decision on a stalled Redis took %v with a timeout of 1s", took)
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

// TestConstructorErrors: what the constructors refuse, and that they say why.
func TestConstructorErrors(t *testing.T) {
	ignoresDeadlines := redis.NewClient(&redis.Options{Addr: shared.Addr})
	t.Cleanup(func() { ignoresDeadlines.Close() })
	good := shared.client(t)
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		limit  keylimit.Limit
		opts   []redislimit.Option
		want   string
	}{
		{"nil client", nil, keylimit.PerHour(1), nil, "client is nil"},
		{"client ignores deadlines", ignoresDeadlines, keylimit.PerHour(1), nil, "ContextTimeoutEnabled"},
		{"invalid limit", good, keylimit.Per(0, time.Second), nil, "keylimit: events 0 is below 1"},
		{"zero timeout", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithTimeout(0)}, "timeout 0s is not positive"},
		{"negative deny cache", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithDenyCacheSize(-1)}, "deny cache size -1"},
		{"negative backoff", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailureBackoff(-1)}, "backoff -1ns is negative"},
		{"nil clock", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithClock(nil)}, "WithClock(nil)"},
		{"zero policy", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailurePolicy{})}, "zero FailurePolicy"},
		{"FailLocal(0)", good, keylimit.PerHour(1), []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailLocal(0))}, "FailLocal(0)"},
	} {
		for _, typ := range types {
			lim, err := typ.new(c.client, c.limit, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: error %v, want one containing %q", typ.name, c.name, err, c.want)
			}
			if lim != nil {
				t.Errorf("%s, %s: a limiter came with the error", typ.name, c.name)
			}
		}
	}
	if _, err := redislimit.NewTokenBucket(good, keylimit.Per(1, 60*24*time.Hour)); err == nil ||
		!strings.Contains(err.Error(), "redislimit: burst 1 at one event per 1440h0m0s spans more than") {
		t.Errorf("a bucket spanning 60 days: error %v, want one saying the span is too long", err)
	}
	for _, typ := range types[1:] {
		if _, err := typ.new(good, keylimit.Per(1, 1500*time.Nanosecond)); err == nil ||
			!strings.Contains(err.Error(), "period 1.5µs is not a whole number of microseconds") {
			t.Errorf("%s with a period of 1.5µs: error %v, want one about microseconds", typ.name, err)
		}
	}
}

// TestKillUnderLoad kills and restarts redis-server while goroutines keep
// deciding on it: nothing panics or races, the errors reach OnError, and
// once Redis is back (and the backoff over) decisions are exact again.
func TestKillUnderLoad(t *testing.T) {
	for _, typ := range types {
		t.Run(typ.name, func(t *testing.T) {
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
					admitted, took.end.Sub(took.start), errs.errs[errsBefore:], most)
			}
		})
	}
}

// waitUntilBack waits until lim reaches Redis again. After a burst of
// failed dials, go-redis's pool stops dialing and probes the server once a
// second, so a restarted server may be unreachable for a second or so.
func waitUntilBack(t *testing.T, lim keylimit.Limiter[string]) {
	t.Helper()
	peek := lim.(interface {
		PeekContext(context.Context, string) (keylimit.Result, error)
	}).PeekContext
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = peek(context.Background(), "probe"); err == nil {
			return
		}
	}
	t.Fatalf("the limiter did not reach the restarted Redis within 10s: %v", err)
}

// TestFailLocalShare: under FailLocal(4), a request within the fleet's
// quota but above the instance's share is refused while Redis is down, but
// not as "never" (InfDuration): it can pass once Redis is back, so it is
// told to retry after the backoff or the limit's interval, the later.
func TestFailLocalShare(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
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
	client := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
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
