// Package keylimit is a per-key rate limiter that lives in the process:
// lim.Allow(key) decides in tens of nanoseconds, takes no lock and allocates
// nothing for a key it has seen before.
//
// # A first example
//
//	lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(10).WithBurst(20))
//	if err != nil {
//		return err
//	}
//	defer lim.Close()
//
//	if !lim.Allow(userID) {
//		return errTooManyRequests
//	}
//
// # Limits and algorithms
//
// A Limit is Events per Period (Per, PerSecond, PerMinute, PerHour), and for a
// token bucket a Burst (WithBurst). Every limiter is generic in its key type
// K, any comparable type: strings, integers, structs of them.
//
// TokenBucket gives each key a bucket of Burst tokens that refills
// continuously, one token every Period/Events. It runs the generic cell rate
// algorithm (GCRA): a key's whole state is one int64, the time at which its
// bucket will be full again, updated by one compare-and-swap. Refill is never
// stored, so no fraction of a token is lost to rounding.
//
// FixedWindow admits Events per window of Period, windows aligned to
// multiples of Period since the Unix epoch, so that every instance agrees on
// them. A key's state is one word, its window and its count, updated by one
// compare-and-swap. It is the cheapest and the easiest to explain to users
// ("100 per minute, resetting on the minute"), but at a boundary a client
// can pass up to 2 × Events within moments: Events at the end of one window
// and Events at the start of the next.
//
// SlidingWindow is exact: it never admits more than Events in any interval of
// length Period. It keeps a log of each key's last Events admission times,
// 8 bytes each (Events is capped at MaxSlidingWindowEvents, 10,000: 80 KB a
// key). Admissions take a per-key lock, since the log and its head are two
// words; refusals and Peek read a consistent snapshot without it.
//
// SlidingCounter estimates the sliding window from two aligned windows: the
// previous window's count, weighted by the share of it still inside the
// sliding window, plus the current count. Its state is one word whatever the
// quota, updated by one compare-and-swap. It is an estimate: it can admit
// more than Events in an interval of Period (never more than twice) or
// refuse too early; both happen only to clients near their limit.
//
// All combines limiters on the same key, all or nothing: 10 a minute and 500
// an hour. A request one of them refuses takes nothing from the others.
//
// Every limiter type takes per-key limits and changes of limit at run time.
// WithKeyLimit gives keys limits of their own (tiers: a paying client twice
// the quota of a free one); the limit is resolved when a key is first seen
// and kept with its state, so the hot path never asks for it. SetLimit
// changes a limiter's limit while it runs: every key moves to it on its next
// call, keeping what it used: a TokenBucket its debt in tokens, a
// FixedWindow the count of its window, a SlidingWindow its admission times, a
// SlidingCounter its counts. So a change of limit never creates capacity:
// each type's SetLimit states the bound it keeps however often the limit
// changes.
//
// # Results
//
// Allow and AllowN answer yes or no. Take answers with a Result: whether the
// events were admitted, the quota (Limit), what Remaining, how long until the
// same request could pass (RetryAfter), and until the quota is whole again
// (ResetAfter), which is what HTTP rate-limit headers need. Peek reports the
// same without consuming. A request that can never pass (n above the quota)
// is refused with RetryAfter InfDuration; WaitN reports it as ErrExceedsLimit
// instead of sleeping forever.
//
// # Guarantees
//
//   - Exact: a TokenBucket never admits more than Burst + elapsed/Interval
//     events for a key over any interval, under any number of goroutines.
//     On a frozen clock, a million concurrent Allow calls on one key admit
//     exactly Burst. A FixedWindow never admits more than Events in one
//     aligned window, a SlidingWindow never more than Events in any interval
//     of Period. A SlidingCounter's counts are exact; its decisions follow
//     an estimate (see SlidingCounter).
//   - Lock-free: for an existing key, Allow reads the clock, loads the key's
//     state without a lock and makes one compare-and-swap (TokenBucket,
//     FixedWindow, SlidingCounter). A refused call writes nothing to shared
//     memory. A SlidingWindow admits under a per-key lock and refuses
//     without it.
//   - Time moves forward only: the state is read and written against a
//     clock reading taken inside the CAS loop; a clock that steps back (an
//     injected one: the default clock is monotonic) never creates capacity
//     and never panics.
//   - Invalid configuration is an error from the constructor that says what is
//     wrong ("keylimit: burst 0 is below 1"), never a panic later.
//
// # Memory and eviction
//
// A limiter keeps no copy of its keys: its map is keyed by a 64-bit seeded
// hash of the key (two keys that collide share a state, which can only make
// the limiter stricter for them, and by chance happens to one pair in about
// 30 million at a million live keys). A TokenBucket costs about 50 to 66
// bytes of heap per live key, the map included.
//
// Every limiter forgets a key once its state is indistinguishable from a new
// key's (a full bucket), so forgetting never changes a decision: a background
// sweep retires each idle state by compare-and-swap before removing it, and
// an admission racing with it either lands first, keeping the key, or starts
// over on a fresh state. WithEvictionInterval sets the sweep interval
// (default: the time a key takes to refill, between 10 s and 10 min). Close
// stops the sweeper; a limiter dropped without Close stops it when the
// garbage collector finds the limiter unreachable.
//
// WithMaxKeys caps the number of keys, which bounds memory under a flood of
// new keys. At the cap, idle keys make room; if none can, the new key is
// refused (or admitted uncounted, with WithAdmitUntracked) and its Result
// says Untracked. Keys already tracked keep their state: a flood of new keys
// never resets the limit of a key in use.
//
// # Concurrency
//
// Every method of every limiter is safe for concurrent use. There is no
// zero value to use: build limiters with their constructors.
//
// # Time
//
// Limiters read the system's monotonic clock, so wall-clock steps do not
// reach them. WithClock injects a github.com/benbjohnson/clock Clock; tests
// pass clock.NewMock() and step time by hand. State is kept in int64
// nanoseconds since the limiter's creation: a limiter works for 73 years
// (2^61 ns) after it is created, and a single span (Burst × Interval, a
// Period) is at most 2^60 ns, about 36 years; longer ones are configuration
// errors.
//
// The interval of a Limit, Period/Events, is rounded up to a whole
// nanosecond, so that a bucket never refills faster than its limit: PerSecond(3)
// refills one token every 333,333,334 ns.
package keylimit
