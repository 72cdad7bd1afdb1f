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
//	lim, err := redislimit.NewTokenBucket(client, "api", keylimit.PerMinute(100))
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
// pass the same behaviour suite (keylimit/limitertest), every case of it.
// Like those, they have per-key limits (SetKeyLimit, which takes the same
// function as keylimit's),
// SetLimit, Admit and Refund, and Wait / WaitN: code written for the
// in-memory limiters runs on Redis with other constructors. They take a
// redis.UniversalClient of github.com/redis/go-redis/v9, so a single
// server, Sentinel and Cluster all work; so does Valkey, which speaks the
// same protocol and runs the same Lua (not tested here).
//
// # One script per decision, on Redis time
//
// Each decision is one call of a Lua script (EVALSHA; EVAL once when the
// server does not know it yet), which Redis runs atomically: reading the
// state, deciding and writing it cannot interleave with another instance's
// decision, so admissions are exact across the fleet, under any load. The
// script reads the time from the server (TIME), never from the caller, so
// instances whose clocks disagree by minutes still agree. The script is
// under lua/, commented: a bucket keeps its theoretical arrival time to the
// nanosecond, a fixed window its window and count, a sliding window its
// admission times.
//
// The limit a key is under travels with each call; the state records what
// it needs to be read under another limit (a bucket the interval of its
// TAT, a fixed window its period), so a key keeps what it used when its
// limit changes (SetLimit, SetKeyLimit, another instance's limit): a
// change never creates capacity.
//
// # Several limits, one round trip
//
// keylimit.All of Redis limiters on one client is one script call per
// decision: 10 a minute AND 500 an hour on one API key is one
// round trip, admitted or refused, all or nothing inside Redis, and reports
// each limit's Result (keylimit.All's TakeEach). With in-process limiters among
// them (keylimit.All(memory, minute, hour)), the in-process ones decide
// first and the Redis ones after, in one round trip; a request an
// in-process one refuses makes none, its Results of the Redis ones the
// zero Result.
//
// # Names, prefixes, and Redis Cluster
//
// Every limiter is named for its purpose ("login", "api"). The state of key
// k is one Redis key, prefix{k} (see StateKey for keys that are empty or
// hold a '}'). The default prefix holds the name, the
// algorithm and the limit ("keylimit:login:fixed:5/1m0s/5:"), so two
// limiters share state only when they agree on all three: the instances of
// one fleet do; a "login" and a "signup" limiter of the same limit do not,
// nor two limits of one name. A change of the limit in the constructor
// therefore starts every key afresh, once (SetLimit keeps the prefix).
// WithPrefix sets a prefix of your own, to share state on purpose or to
// keep it across such a change (the script then reads the old state under
// the new limit).
//
// k is the hash tag: on Redis Cluster the states of one key under several
// limiters share a slot, and a joined decision runs on one node; different
// keys spread over the cluster. No key can empty the tag or choose another
// (a '}' in it would end the tag): such a key is tagged by a hash of all of
// it. A prefix that contains '{' takes the tag
// over: every key of that limiter then lives in one slot (one node takes
// all its load), and keylimit.All does not join it on a cluster. Every key expires
// on its own once its state is the same as no state at all: a bucket when
// it is full again, a fixed window when it ends, a sliding log when its
// newest entry leaves (or up to an epoch later, at most a period: see
// SlidingWindow). Nothing needs cleaning up, and an idle key costs Redis
// nothing.
//
// # Concurrency limits
//
// Concurrency is a limit of another kind: at most N slots of a key held at
// once across the fleet, the keylimit.ConcurrencyLimiter of
// keylimit.Concurrency (TryAcquire, Acquire, the Permit's Release) on
// Redis. Each hold is a member of a sorted set per key with its expiry on
// Redis time, renewed by its instance while the Permit is held; one script
// call acquires, one releases. Waiters are served first come, first served
// within an instance, and across instances in turn, by a queue of tickets
// in Redis (one per instance and key, each expiring a second after its
// waiter last asked). Its type's doc says what holds when an instance dies
// or is paused.
//
// # What Redis must be
//
// Redis 4.0 or later, with maxmemory-policy noeviction, or no maxmemory. A
// limiter's state is its keys, and every one has a TTL, so every other policy
// (allkeys-* and volatile-* alike) lets Redis delete keys in use under
// memory pressure, and their quotas start afresh. Under noeviction a full
// Redis refuses writes instead: decisions fail, the failure policy answers
// and the outage is logged. The limiter reads the policy with CONFIG GET at
// its first successful call and logs a warning if it can evict; Ping checks
// it on demand. A cache wants an eviction policy, and the policy is the
// server's, whatever the database: keep limits and caches on separate
// servers.
//
// It must keep its data on disk too. A Redis that keeps nothing (save ""
// and appendonly no) forgets every limiter key when it restarts, and so
// does a FLUSHALL on any Redis: every quota starts afresh at once, and the
// fleet admits each key's whole quota again within the same window, a
// bucket its whole burst. The deny cache hides it for up to the RetryAfter
// of each refusal it remembers; then the reset shows. The remedies are
// appendonly yes (with appendfsync everysec a crash loses about the last
// second's admissions, which are made again), or a replica that a failover
// promotes before the master comes back (Sentinel, Cluster): a master that
// restarts empty with no failover empties its replicas too. RDB snapshots
// alone lose what was admitted since the last. The limiter reads save and
// appendonly with the eviction policy, at its first successful call, and
// logs a warning if the server keeps nothing on disk; Ping returns
// ErrNoPersistence then. Nothing can see a FLUSHALL coming: keep the
// limiter's Redis out of reach of what flushes caches.
//
// The scripts read TIME before they write, which Redis allows because it
// replicates a script by its effects: always since 5.0, and in 4.x when the
// script asks, which these do. A replica promoted by a failover has the
// state that was replicated to it: a manual failover (CLUSTER FAILOVER)
// loses nothing, and in the tests a limit admitted exactly its quota across
// one; a failover after a crash loses what the master had not yet
// replicated, and those admissions are made again.
//
// # The deny cache
//
// Once Redis refuses a key with RetryAfter d, the instance refuses the same
// request (or a larger one) for that key for d without a round trip: a
// flood on a refused key costs a clock read, a hash and a map lookup a call,
// allocates nothing and sends Redis nothing. It never admits what Redis
// would refuse, and keeps no key strings: a remembered key costs about 150
// bytes, whatever its length. See WithDenyCacheSize.
//
// # A penalty for abuse, shared by the fleet
//
// NewPenalty wraps any limiter as keylimit.NewPenalty does, with the
// refusals counted and the ban kept on Redis (one small script per counted
// refusal, on Redis time, the key's hash tag for both of its keys), so that
// a key banned on one instance is banned on all. A ban is announced on
// Pub/Sub; an instance that hears it asks Redis how long the ban has left,
// and answers the bans it knows in process until they end: a banned key
// costs no call to Redis or to the limiter. Since anyone may publish on
// the channel, a message bans, unbans or lengthens nothing Redis does not
// hold. An instance that missed an announcement learns the ban at its
// limiter's first refusal of the key.
//
// # Leases: the fleet's limit at in-process speed
//
// With WithLeases(d), a TokenBucket or FixedWindow takes a hot key's events
// from Redis a lease at a time: one script call takes what this instance
// spent on the key in about d (at most a tenth of the quota; as much as
// Redis has, if less), and the instance admits from it in process, without
// a lock or an allocation, until it is spent or d has passed. A key asked
// less often than about once per d leases nothing and is decided as without
// leases, one call per decision, exactly. One call per key and instance
// fetches at a time; the calls that come meanwhile wait for it (at most the
// timeout), then spend from the new lease.
//
// The fleet never admits more than the limit: every event admitted was
// taken in Redis first, whatever the instances, their clocks or their
// crashes; a bucket counts a lease's events from the end of its lease time,
// so any interval holds at most Burst + its length / Interval events (a
// window's lease ends with its window); and a lease ends on time even if
// an instance's clock (keylimit.WithClock) stops or steps back (see Time). What leases cost is events held
// idle: at most one lease per key and instance, about what that instance
// spent on the key in one lease time and at most a tenth of the quota; it
// goes back to Redis when its time is up (within half a lease time more),
// at Close, or with the next fetch. Meanwhile another instance may be
// refused. An instance that dies holding a lease loses it: those events come
// back only as the bucket refills, or when the window ends. A bucket gives
// back what it would not have refilled within one lease time anyway.
//
// After a fetch that got less than it asked, the instance refuses the key
// in process until the missing events could have come back (a bucket's
// refill of them, at most d; a window's end), so that a hot key costs
// Redis a call per lease time per instance, not one per refill; a bucket's
// instance asks again before the bucket's debt falls below the lease time,
// for a lease then counts from its end and would skip the refill between,
// which no one took (one instance asking without pause lost a fifth of
// the limit so). Results
// are the instance's: Remaining counts the lease's events only, and a
// refusal's RetryAfter is the time until it asks Redis again. A call that
// has waited for three fetches of other calls on the key, each of which
// others spent before it, is refused in process with a RetryAfter of one
// Interval, though Redis may hold events: on a key that hot, the instance
// errs towards refusing rather than queueing without end. SetLimit, or
// a new limit from SetKeyLimit's function, ends the key's leases (none
// admits under an old limit); Refund gives back to the lease while it
// lasts; Reset ends this instance's lease without giving it back (other
// instances may still spend theirs); while Redis fails, a live lease still
// admits what it holds, then the failure policy answers. keylimit.All does
// not join a limiter with leases: it decides limiter by limiter.
//
// # Leases at scale: the share rule
//
// A TokenBucket's lease call also counts the key's fleet: a, the instances
// that leased the key lately (within max(64d, 3 × the scaled period below)
// of their last call), in a sorted set beside the key's state,
// prefix{key}:lf, in its hash slot. While the fleet's share of one lease
// time's refill is minShare (4) events or more (4 × a × Interval <= d), or
// an instance is alone on the key, leases are as above. A larger fleet's
// lease period scales with it: P = 4 × a × Interval, the time the refill
// takes to give every instance 4 events (at 10,000/s, 400 ms for 1,000
// instances, 4 s for 10,000), and the share rule holds:
//
//   - a call takes at most 4 events (n alone if n is more), and at most what
//     the bucket holds beside the lease time; its lease lasts as long as
//     the bucket's debt if that is longer than d's, which moves the bucket's
//     state as a shorter one would, so the bound above is unchanged;
//   - Redis tells the instance its pace, the time before it asks again:
//     what it took × a × Interval (its fair share's time for as many), times
//     a factor that steers what the bucket holds after the call to 8
//     events: above that, shorter paces drain what instances that ask less
//     or come back late leave; below it, slightly longer ones let the
//     bucket hold whole shares. Until then the instance refuses the key in
//     process, with a RetryAfter of what is left of its pace;
//   - a call refused for an empty bucket comes back after a random part
//     (from half) of n × a × Interval / 2, not at once;
//   - an instance whose lease ran out unspent (its host ran it later than
//     the lease lasted) asks for n alone until a lease is spent again;
//   - a key whose call Redis refused is remembered 16 lease times (d) after
//     it, not two, and its next call is a lease call even when it wants no
//     lease: an instance that asks a key the fleet keeps empty less often
//     than every 2d is then counted in the fleet and paced, instead of
//     coming back each time as to a rare key with a plain take that no pace
//     holds back and that takes the refill before the paced instances.
//
// So the shares are max-min fair over the instances that asked lately:
// each instance that keeps asking gets about 4 events per P, those that
// ask less keep what they take, and what they leave goes to the others
// through shorter paces. The bound does not depend on the rule: every event
// is still taken in Redis first and counted from the end of its lease, so
// the fleet never admits more than Burst + elapsed / Interval on a key,
// whatever the paces; the pace is a promise the instances keep, for
// fairness and for Redis's load, not for the bound. What the rule gives, in
// a simulation of the script and of the instances (BenchmarkLeaseSim;
// 10,000/s, burst 100, 20 ms leases), from 10 to 10,000 instances: with
// every instance asking without pause, at least 0.96 of the bound, no
// instance without an admission for more than 1.6 periods P, and 0.37
// script calls per admission at 100 instances; with a tenth asking without
// pause and the others 5 times a second, at least 0.91 of the bound, and no
// instance of the first without an admission for more than 1.8 P. A host
// that wakes goroutines late loses events: a lease lasts at most Burst ×
// Interval (10 ms there), and a lease its instance comes back to later is
// lost to the fleet (woken up to 20 ms late, the fleet admits 0.3 to 0.75
// of the bound). Fixed windows take no share rule.
//
// A SlidingWindow takes no leases: its log holds each admission's time, and
// an event leased at one time and spent later would leave the window early.
//
// # When Redis fails
//
// Every call has a deadline: WithTimeout (DefaultTimeout, 100 ms), or the
// context's if earlier, for the methods that take one (TakeContext,
// AdmitContext, PeekContext, RefundContext). Those run the
// call under the caller's context, so its values reach the client (tracing
// spans have their parent), and a context that has ended makes no call. The
// client must honour context deadlines (ContextTimeoutEnabled; the
// constructors refuse a client known not to), so a dead or stalled Redis
// holds no call longer than that.
//
// When a call fails or times out, the failure policy answers
// (WithFailurePolicy). Across a fleet of N instances, while Redis fails:
//
//	FailOpen      admits everything: no limit
//	FailClosed    admits nothing
//	FailLocal(k)  each instance decides alone on 1/k of the limit: N/k times the limit
//
// The default is FailLocal(n) given WithFleetSize(n), about the limit; without
// it, FailLocal of the live fleet's size: each instance announces itself on
// Redis while Redis answers (at most every 2 s, after a call; an
// announcement lives 10 s on Redis time, and Close withdraws it) and reads
// how many are announced, and while Redis fails it decides alone on 1/N of
// the limit, N the count it read at the last answer. So the fleet admits
// about the limit while Redis fails, plus a little while it grows: an
// instance that has not yet learned of the newest instances (within 2 s of
// their first call) decides on a larger share. While some instances reach
// Redis and others do not (a split), those that do share the limit on Redis
// and those that do not their shares besides: at most (1 + k/N) times the
// limit with k cut off. Each limiter logs at construction what its policy
// admits (at Info when neither was chosen). The error goes to the WithOnError callback and is
// returned by the Context methods. For the failure backoff that follows
// (WithFailureBackoff: 62.5 ms after a lone failure, growing to a second
// by default while Redis keeps failing) calls other than Reset are
// answered by the policy without trying Redis, so an outage costs one
// timeout per backoff, not one per call. Once Redis answers again,
// decisions are exact again.
//
// # What operators see
//
// Through log/slog (keylimit.WithLogger; slog.Default() otherwise), each once, never
// per request: at construction, what the failure policy admits; the start
// (Warn) and end (Info) of each outage, at most one start a minute; an
// eviction policy that can reset limits, and a server that keeps nothing on
// disk (Warn). Stats counts requests
// admitted and refused, round trips, errors, fallback decisions and deny
// cache hits. Ping, at start-up, checks that Redis answers, takes the
// scripts, will not evict their keys and keeps them on disk.
//
// # Time
//
// Decisions are made on Redis time, which has microsecond resolution.
// Window periods must be whole microseconds; a bucket's interval may be any
// number of nanoseconds, and its span (Burst × Interval) at most about 52
// days, the most the script computes exactly with Lua's doubles. Local time
// (keylimit.WithClock) serves the deny cache, the failure backoff, the FailLocal
// fallback, the sleeps of Wait and WaitN, and leases: a lease, a refusal
// remembered and a ban known end when their time is up on the local clock
// or, if keylimit.WithClock gave one, on the system's monotonic clock, whichever is
// first, so a clock that stops or steps back cannot make them outlive the
// time Redis counted.
//
// # Concurrency and cost
//
// Every method is safe for concurrent use, from any number of goroutines and
// instances. An admitted decision costs one round trip and at most two
// allocations beyond the client's own (a context with a deadline and the
// arguments are reused between calls), or none from a lease. Admit and
// AdmitContext allocate once more, for the Admission: it is bound to its key
// and refunded at most once, however often it is copied. When more than
// four takes of one limiter are under way, the rest share round trips,
// and takes of the same arguments share script calls (on one server, or
// in one Cluster slot), each decided as alone, in order. There is no
// zero value to use: build limiters with their constructors. Close releases
// the fallback limiter, and gives back what leases hold; the client is the
// caller's to close.
package redislimit
