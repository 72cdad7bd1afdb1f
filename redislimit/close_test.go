package redislimit_test

import (
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestCloseLeavesNoGoroutine: leased limiters, under the default failure
// policy (which announces the instance in the live fleet) and under
// FailClosed, each on a client of its own, hammered on a few keys from
// many goroutines, with a SetLimit under way (whose leases are given back
// in the background): once each is closed, and its client, the process
// runs exactly the goroutines it ran before they were made. No lease
// sweeper, announcement, give-back or call timer of theirs goes on after
// Close (a run of BenchmarkLeasedFleet after another sees nothing of it).
func TestCloseLeavesNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redislimit.Option
	}{
		{"default policy", nil},
		{"FailClosed", []redislimit.Option{redislimit.WithFailurePolicy(redislimit.FailClosed())}},
		// On a clock that stands still, the sweepers never forget a key
		// (nor stop for want of keys): only Close stops them.
		{"clock stands still", []redislimit.Option{keylimit.WithClock(clock.NewMock())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const instances, goroutines, calls = 8, 4, 300
			before := runtime.NumGoroutine()
			prefix := fmt.Sprintf("%s:%d:", t.Name(), keySeq.Add(1))
			fleet := make([]*redislimit.TokenBucket, instances)
			clients := make([]*redis.Client, instances)
			for i := range fleet {
				clients[i] = redis.NewClient(&redis.Options{Addr: shared.Addr, ContextTimeoutEnabled: true, PoolSize: 2})
				opts := append([]redislimit.Option{redislimit.WithLeases(20 * time.Millisecond), redislimit.WithPrefix(prefix),
					redislimit.WithTimeout(patient)}, tc.opts...)
				lim, err := redislimit.NewTokenBucket(clients[i], "close", keylimit.PerSecond(2_000).WithBurst(50), opts...)
				require.NoError(t, err)
				fleet[i] = lim
			}
			// swept: an instance's lease sweeper ran when its first
			// goroutine looked, just after its first take.
			var swept atomic.Bool
			var wg sync.WaitGroup
			for i, lim := range fleet {
				for g := range goroutines {
					wg.Go(func() {
						for j := range calls {
							lim.Take(fmt.Sprint("k", (g+j)%3), 1)
							if g == 0 && j == 0 && redislimit.SweeperRuns(lim) {
								swept.Store(true)
							}
							if g == 0 && j == calls/2 && i%2 == 0 {
								require.NoError(t, lim.SetLimit(keylimit.PerSecond(1_000).WithBurst(50)))
							}
						}
					})
				}
			}
			wg.Wait()
			// Not a vacuous test: the limiters ran goroutines of their own.
			// (Counted while they take: on the real clock a sweeper ends of
			// itself once its keys are idle, and the process's count may
			// have fallen below before by then, as other tests' goroutines
			// end.)
			require.True(t, swept.Load(), "the limiters run goroutines of their own (lease sweepers)")
			for i, lim := range fleet {
				require.NoError(t, lim.Close())
				require.NoError(t, clients[i].Close())
			}
			waitGoroutines(t, before)
		})
	}
}

// waitGoroutines waits until the process runs no more goroutines than
// want, none of them in redislimit's code or go-redis's (a goroutine that
// has signalled its end may take a moment to exit), and fails, listing
// them, if it still does after 10 s. (Fewer than want is no failure: a
// goroutine of the test binary's, such as a copier of a server's output,
// may end meanwhile.)
func waitGoroutines(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, ours, all := ourGoroutines()
		if n <= want && ours == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after Close: %d goroutines, %d before the limiters were made; %d in redislimit's or go-redis's code:\n%s", n, want, ours, all)
		}
		time.Sleep(time.Millisecond)
	}
}

// ourGoroutines returns how many goroutines the process runs, how many of
// them are in redislimit's code (not its tests') or go-redis's, and the
// goroutine profile.
func ourGoroutines() (n, ours int, profile string) {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	profile = b.String()
	for _, g := range strings.Split(profile, "\n\n") {
		if !strings.HasPrefix(g, "goroutine ") {
			continue
		}
		n++
		if strings.Contains(g, "github.com/keylimit/keylimit/redislimit.") || strings.Contains(g, "github.com/redis/go-redis/") {
			ours++
		}
	}
	return n, ours, profile
}
