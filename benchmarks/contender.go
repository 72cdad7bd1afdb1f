package benchmarks

import (
	"io"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
)

// Limiter is the one call every benchmark, every count and every memory
// measurement makes: may one event for key happen now? A call that fails
// with an error is a refusal (and the limiter counts it, see Errors).
type Limiter interface {
	Allow(key string) bool
}

// Errors is implemented by the limiters whose library can fail a decision
// with an error: it returns how many calls did since the limiter was built.
type Errors interface {
	Errors() int64
}

// Quota is the limit every contender is built from: at most Burst events at
// once per key, refilled at Burst per Period (a token bucket), or Burst events
// per Period (a window).
type Quota struct {
	Burst  int
	Period time.Duration
	// Sweep, when not zero, asks the contenders that can evict idle keys to
	// look for them this often, and to treat a key as idle once Period has
	// passed since its last use. Zero keeps each library's default.
	Sweep time.Duration
}

// Kind says what a contender is.
type Kind int

const (
	// Floor is not a limiter: the least any keyed limiter can do per call.
	Floor Kind = iota
	// Keylimit is one of keylimit's limiter types.
	Keylimit
	// Peer is another Go rate limiter.
	Peer
)

// Contender is one limiter under test: what it is called (the limiter's
// part of a benchmark name) and how to build it. What each one is, and how
// its idle keys leave it, is said where it is defined and in NOTES.md.
type Contender struct {
	Name string
	Kind Kind
	// Evicts says whether keys leave the limiter once idle; if not, its
	// memory only grows.
	Evicts bool
	// New builds the limiter for q. Call Close on it when done.
	New func(q Quota) (Limiter, error)
	// Bound is the most it may admit on one key in a given time; nil means
	// BucketBound.
	Bound Bound
}

// Contenders returns every contender, in the order the tables list them: the
// floor, keylimit's types, then the peers.
func Contenders() []Contender {
	return []Contender{
		floorContender,
		keylimitContender("keylimit-bucket", BucketBound, keylimit.NewTokenBucket[string]),
		keylimitContender("keylimit-fixedwindow", EpochWindowBound, keylimit.NewFixedWindow[string]),
		keylimitContender("keylimit-slidingwindow", BucketBound, keylimit.NewSlidingWindow[string]),
		keylimitContender("keylimit-slidingcounter", EpochWindowBound, keylimit.NewSlidingCounter[string]),
		xtimeSyncMap,
		xtimeRWMutex,
		jujuSyncMap,
		jujuRWMutex,
		sethvargoMemory,
		ululeMemory,
		throttledMemstore,
	}
}

// floorContender is not a limiter: hotpath.Floor, the least a keyed limiter
// can do per call (a clock read, an xsync.MapOf Load, one CAS), the same
// floor the root package's benchmarks print. It never forgets a key.
var floorContender = Contender{
	Name: "floor",
	Kind: Floor,
	New:  func(Quota) (Limiter, error) { return hotpath.NewFloor(), nil },
}

// Close releases lim's background work, if it has any.
func Close(lim Limiter) error {
	if c, ok := lim.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// keylimitLimiter is what every keylimit limiter type is, seen from here.
type keylimitLimiter interface {
	Limiter
	io.Closer
}

// keylimitContender turns a keylimit constructor into a contender, so that
// each keylimit type is one line of Contenders: its name, the bound its
// algorithm keeps, its constructor. The limiter it builds is the keylimit
// type itself, not a wrapper: a benchmark calls its Allow through Limiter
// exactly as it calls the floor's. A background sweep every
// WithEvictionInterval (Quota.Sweep if set) removes the keys
// indistinguishable from new ones.
func keylimitContender[L keylimitLimiter](name string, bound Bound, newL func(keylimit.Limit, ...keylimit.Option) (L, error)) Contender {
	return Contender{
		Name:   name,
		Kind:   Keylimit,
		Bound:  bound,
		Evicts: true,
		New: func(q Quota) (Limiter, error) {
			var opts []keylimit.Option
			if q.Sweep > 0 {
				opts = append(opts, keylimit.WithEvictionInterval(q.Sweep))
			}
			lim, err := newL(keylimit.Per(q.Burst, q.Period), opts...)
			if err != nil {
				return nil, err
			}
			return lim, nil
		},
	}
}
