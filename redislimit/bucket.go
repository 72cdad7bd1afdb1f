package redislimit

import (
	"fmt"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
)

// TokenBucket is keylimit.TokenBucket kept in Redis, so that every instance
// of a fleet shares one bucket per key: each key has a bucket of
// Limit.BurstSize() tokens that refills continuously, one token every
// Period/Events, on Redis server time. It gives the Results the
// in-memory bucket gives for the same history.
//
// Each decision is one Lua script call (lua/bucket.lua). The key's state is
// its theoretical arrival time (TAT) in ns, one string that expires when the
// bucket is full again (a state an older version wrote is read as it was
// meant; lua/bucket.lua says how a version before this one fails on this
// one's). All methods are safe for concurrent use, from any
// number of goroutines and instances, and admissions are exact across the
// fleet.
type TokenBucket struct {
	Keyed
}

// maxBucketSpan bounds Burst × Interval for a Redis bucket: the script does
// its arithmetic in Lua doubles, exact for integers below 2^53 ns; keeping
// spans below 2^52 ns (about 52 days) leaves room for the sums it forms.
const maxBucketSpan = time.Duration(1 << 52)

// NewTokenBucket returns a TokenBucket named name that admits l.Events per
// l.Period per key across every instance that shares client's Redis and the
// prefix, at most l.BurstSize() at once. name says what the limit is for
// ("login", "api"): it is in the Redis keys (see WithPrefix) and the logs.
//
// It returns an error if name is empty or holds other than letters, digits
// and - _ . : /, if l is invalid (the error keylimit.Limit.Validate gives),
// if Burst × Interval is more than about 52 days (the most the script
// computes exactly), if client is nil or known to ignore context deadlines
// (a *redis.Client, *redis.ClusterClient or *redis.Ring whose Options have
// ContextTimeoutEnabled false), or if an option is invalid. It does not
// contact Redis (see Ping).
func NewTokenBucket(client redis.UniversalClient, name string, l keylimit.Limit, opts ...Option) (*TokenBucket, error) {
	b := new(TokenBucket)
	err := b.init(client, name, l, &bucketAlgorithm, opts, func(l keylimit.Limit, opts ...keylimit.Option) (fallbackLimiter, error) {
		return keylimit.NewTokenBucket[string](l, opts...)
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// bucketAlgorithm is lua/bucket.lua's: its parameters are the interval and
// tau (Burst × Interval), in ns.
var bucketAlgorithm = algorithm{
	name:     "bucket",
	arg:      "bucket",
	unit:     time.Nanosecond,
	canLease: true,
	refills:  true,
	take:     takeBucketScript,
	takeArgs: bucketTakeArgs,
	fresh:    bucketFresh,
	params: func(l keylimit.Limit) (int64, int64, int, error) {
		if err := l.Validate(); err != nil {
			return 0, 0, 0, err
		}
		iv, burst := l.WithBurst(1).FillTime(), l.BurstSize()
		if time.Duration(burst+1) > maxBucketSpan/iv {
			return 0, 0, 0, fmt.Errorf("redislimit: burst %d at one event per %v spans more than %v, the most a script computes exactly",
				burst, iv, maxBucketSpan)
		}
		return int64(iv), int64(burst) * int64(iv), burst, nil
	},
}

// A TokenBucket is a keylimit limiter that can give events back, so
// keylimit.All combines it (with other limiters of either kind), and joins
// it with the Redis limiters on its client in one call.
var (
	_ keylimit.ContextLimiter[string] = (*TokenBucket)(nil)
)
