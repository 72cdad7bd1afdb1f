// Package redislimit is keylimit's limiters kept in Redis, so that a fleet of
// instances behind a load balancer shares one count per key: N instances
// admit what one would, not N times as much.
//
// # A first example
//
//	client := redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true, // required: every decision has a deadline
//	})
//	lim, err := redislimit.NewTokenBucket(client, keylimit.PerMinute(100),
//		redislimit.WithPrefix("ratelimit:api:"))
//	if err != nil {
//		return err
//	}
//	if !lim.Allow(apiKey) {
//		return errTooManyRequests
//	}
//
// TokenBucket, FixedWindow and SlidingWindow implement
// keylimit.Limiter[string] with the semantics and Results of the in-memory
// keylimit.TokenBucket, keylimit.FixedWindow and keylimit.SlidingWindow, and
// pass the same behaviour suite (keylimit/limitertest). Like those, they
// have Refund (so keylimit.All can combine them) and Wait / WaitN. They take a
// redis.UniversalClient of github.com/redis/go-redis/v9, so a single server,
// Sentinel and Cluster all work.
//
// # One script per decision, on Redis time
//
// Each decision is one call of a Lua script (EVALSHA; EVAL once when the
// server does not know it yet), which Redis runs atomically: reading the
// state, deciding and writing it cannot interleave with another instance's
// decision, so admissions are exact across the fleet, under any load. The
// script reads the time from the server (TIME), never from the caller, so
// instances whose clocks disagree by minutes still agree. The scripts are
// under lua/, commented: a bucket keeps its theoretical arrival time to the
// nanosecond, a fixed window its window and count, a sliding window the list
// of its admission times.
//
// Each decision touches one key, prefix+key (WithPrefix), so Redis Cluster
// routes it to one node. Every key expires on its own once its state is the
// same as no state at all: a bucket when it is full again, a fixed window
// when it ends, a sliding log when its newest entry leaves. Nothing needs
// cleaning up, and an idle key costs Redis nothing.
//
// The scripts need Redis 4.0 or later. They read TIME before they write,
// which Redis allows because it replicates a script by its effects: always
// since 5.0, and in 4.x when the script asks, which these do.
//
// # The deny cache
//
// Once Redis refuses a key with RetryAfter d, the instance refuses the same
// request (or a larger one) for that key for d without a round trip: a
// flood on a refused key costs a clock read and a map lookup a call,
// allocates nothing and sends Redis nothing. It never admits what Redis
// would refuse. See WithDenyCacheSize.
//
// # When Redis fails
//
// Every call has a deadline: WithTimeout (DefaultTimeout, 100 ms), or the
// context's if earlier, for the methods that take one (TakeContext,
// PeekContext, ResetContext, RefundContext). The client must honour context
// deadlines (ContextTimeoutEnabled; the constructors refuse a client known
// not to), so a dead or stalled Redis holds no call longer than that.
//
// When a call fails or times out, the failure policy answers
// (WithFailurePolicy): FailOpen admits, FailClosed refuses, FailLocal (the
// default) decides in process with a keylimit limiter of the same algorithm
// and a share of the limit. The error goes to the WithOnError callback and
// is returned by the Context methods. For the failure backoff that follows
// (WithFailureBackoff, one second by default) calls other than Reset are
// answered by the policy without trying Redis, so an outage costs one
// timeout per backoff, not one per call. Once Redis answers again,
// decisions are exact again.
//
// # Time
//
// Decisions are made on Redis time, which has microsecond resolution.
// Window periods must be whole microseconds; a bucket's interval may be any
// number of nanoseconds, and its span (Burst × Interval) at most about 52
// days, the most the script computes exactly with Lua's doubles. Local time
// (WithClock) serves only the deny cache, the failure backoff, the FailLocal
// fallback and the sleeps of Wait and WaitN.
//
// # Concurrency and cost
//
// Every method is safe for concurrent use, from any number of goroutines and
// instances. An admitted decision costs one round trip and at most two
// allocations beyond the client's own (a context with a deadline and the
// arguments are reused between calls). There is no zero value to use:
// build limiters with their constructors. Close releases the fallback
// limiter; the client is the caller's to close.
package redislimit
