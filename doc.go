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
// # The limiters
//
// A Limit is Events per Period (Per, PerSecond, PerMinute, PerHour), and for
// a token bucket a Burst (WithBurst). Every limiter is generic in its key
// type, any comparable type, and implements Limiter:
//
//	TokenBucket     a bucket of Burst tokens per key, refilled continuously (GCRA, one int64 a key)
//	FixedWindow     Events per window of Period, aligned to the epoch (one word a key)
//	SlidingWindow   exactly Events in any interval of Period (a log of 8 bytes per event a key)
//	SlidingCounter  about Events in any interval of Period, estimated from two windows (one word a key)
//	All             several limits on one key, all or nothing: 10 a minute and 500 an hour
//
// NewPenalty wraps any limiter and bans the keys that keep asking after
// their refusals: a key refused Ban.Refusals times within Ban.Within is
// refused outright for Ban.For, in process, with Result.Banned set; a ban
// never makes a decision looser than the limiter's.
//
// A rate limit bounds how often a key acts; Concurrency bounds how many of
// its calls run at once: at most N slots of a key held at once, acquired
// with TryAcquire or Acquire (waiting, first come, first served) and given
// back by the Release of the Permit an acquisition returns (a
// ConcurrencyLimiter, not a Limiter). Package adaptive's Limiter is one
// whose limits find themselves: each key's, and an overall one, move
// between a floor and a ceiling from the latency of its calls and those
// dropped for overload (Permit.Drop), fair between keys, shedding
// Sheddable requests first and Critical ones last (WithCriticality).
//
// SetKeyLimit gives keys limits of their own (tiers), resolved when a key
// is first seen; SetLimit changes a limiter's limit while it runs, and every
// key keeps what it used, so a change never creates capacity.
//
// Allow and AllowN answer yes or no. Take answers with a Result: whether the
// events were admitted, the quota, what remains, how long until the same
// request could pass (RetryAfter), until more quota is available
// (RefillAfter) and until the quota is whole (ResetAfter), which is what
// HTTP rate-limit fields need. Peek reports the same without
// consuming. A request that can never pass (n above the quota) is refused
// with RetryAfter InfDuration, and WaitN reports it as ErrExceedsLimit.
//
// # Guarantees
//
//   - Exact: a TokenBucket never admits more than Burst + elapsed×Events/Period
//     events for a key over any interval, a FixedWindow never more than
//     Events in one aligned window, a SlidingWindow never more than Events in
//     any interval of Period, under any number of goroutines. A
//     SlidingCounter counts exactly and decides on an estimate.
//   - Lock-free: for an existing key, Allow reads the clock, loads the key's
//     state without a lock and makes one compare-and-swap, and a refused call
//     writes nothing. A call whose compare-and-swap another caller of the
//     key won waits a moment (a few microseconds at most) before it tries
//     again, so that on a hot key the winner runs on. Two exceptions: a
//     SlidingWindow admits under a per-key lock (one compare-and-swap; a
//     waiter waits up to about 16 microseconds a try, and parks until the
//     lock is released if its holder is off its CPU), and a call that meets a key
//     while SetLimit moves it to a new limit yields until the move, a few
//     instructions, is done.
//   - Time only moves forward: a limiter decides as at the latest time it
//     has read, so an injected clock that steps back creates no capacity
//     and never panics.
//   - Forgetting never changes a decision: a key is evicted only once its
//     state is the same as a new key's.
//   - A refused request of All takes nothing, and a Refund gives back only
//     what an admission still holds, once, whichever copy of its Admission
//     it is given: however late it comes, no interval admits more than the
//     limit.
//   - Invalid configuration is an error that says what is wrong
//     ("keylimit: burst 0 is below 1"), never a panic later.
//
// # Memory
//
// A limiter keeps no copy of its keys: its map is keyed by a seeded 64-bit
// hash of the key (see DESIGN.md for what a collision does). Idle keys are
// evicted in the background (WithEvictionInterval), and WithMaxKeys caps the
// number of keys, which bounds memory under a flood of new keys without
// resetting the limits of keys in use.
//
// # Concurrency and time
//
// Every method of every limiter is safe for concurrent use. There is no zero
// value to use: build limiters with their constructors, and Close them to
// stop their evictor. Limiters read the system's monotonic clock; WithClock
// injects a github.com/benbjohnson/clock Clock for tests. State is kept in
// int64 nanoseconds since the limiter's creation: a limiter works for 73
// years (2^61 ns) after it is created, and one span (Burst × Period/Events, a
// Period) is at most 2^60 ns, about 36 years.
package keylimit
