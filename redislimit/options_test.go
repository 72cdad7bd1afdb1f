package redislimit_test

import (
	"io"
	"math"
	"strings"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// constructors are the three constructors with the name as the tests pass
// it, for the tests of names and prefixes.
var constructors = []struct {
	name string
	new  func(c redis.UniversalClient, name string, l keylimit.Limit, opts ...redislimit.Option) (prefixed, error)
}{
	{"TokenBucket", func(c redis.UniversalClient, name string, l keylimit.Limit, opts ...redislimit.Option) (prefixed, error) {
		return asPrefixed(redislimit.NewTokenBucket(c, name, l, opts...))
	}},
	{"FixedWindow", func(c redis.UniversalClient, name string, l keylimit.Limit, opts ...redislimit.Option) (prefixed, error) {
		return asPrefixed(redislimit.NewFixedWindow(c, name, l, opts...))
	}},
	{"SlidingWindow", func(c redis.UniversalClient, name string, l keylimit.Limit, opts ...redislimit.Option) (prefixed, error) {
		return asPrefixed(redislimit.NewSlidingWindow(c, name, l, opts...))
	}},
}

// prefixed is a Redis limiter as these tests see it.
type prefixed interface {
	keylimit.Limiter[string]
	StateKey(key string) string
}

// prefixOf returns the prefix of lim's Redis keys: its StateKey of a key
// the hash tag holds, without the tag.
func prefixOf(lim keylimit.Limiter[string]) string {
	return strings.TrimSuffix(lim.(interface{ StateKey(string) string }).StateKey("k"), "{k}")
}

// asPrefixed turns a typed nil pointer into a nil interface, as nilIfErr
// does.
func asPrefixed[L prefixed](lim L, err error) (prefixed, error) {
	if err != nil {
		return nil, err
	}
	return lim, nil
}

// TestNamesKeepLimitersApart pins issue 13.4: a 5/min "login" limiter and a
// 5/min "signup" limiter shared one count per key, because the default
// prefix was made of the algorithm and the limit only; after 5 logins,
// signup refused the same key. Now the name is in the prefix: they share
// nothing, and neither do two limits of one name (as keylimit.All combines
// them), while instances configured alike share one count.
func TestNamesKeepLimitersApart(t *testing.T) {
	for _, typ := range constructors {
		t.Run(typ.name, func(t *testing.T) {
			c := shared.client(t)
			newLim := func(name string, l keylimit.Limit, opts ...redislimit.Option) prefixed {
				lim, err := typ.new(c, name, l, append(opts, redislimit.WithTimeout(patient))...)
				require.NoError(t, err)
				return lim
			}
			key := testKey(t, "alice")
			login, signup := newLim("login", keylimit.PerMinute(5)), newLim("signup", keylimit.PerMinute(5))
			require.True(t, login.AllowN(key, 5), "5 logins")
			require.False(t, login.Allow(key), "a sixth login")
			require.True(t, signup.AllowN(key, 5), "5 signups after 5 logins of the same key")
			require.NotEqual(t, prefixOf(login), prefixOf(signup), "the prefixes of login and signup")

			hourly := newLim("login", keylimit.PerHour(5))
			require.True(t, hourly.AllowN(key, 5), "5 a hour under the name of 5 a minute")

			// A second instance, configured alike, shares the count.
			again, err := typ.new(shared.client(t), "login", keylimit.PerMinute(5), redislimit.WithTimeout(patient))
			require.NoError(t, err)
			require.Equal(t, prefixOf(login), prefixOf(again), "the prefix of an instance configured alike")
			require.False(t, again.Allow(key), "another instance of login, after 5 logins")

			// Asked for: a prefix of one's own shares across names.
			own := newLim("a", keylimit.PerMinute(5), redislimit.WithPrefix(prefixOf(login)))
			require.False(t, own.Allow(key), "a limiter given login's prefix")
		})
	}
}

// TestDefaultPrefix: the default prefix holds the name, the algorithm and
// the limit (events, period, quota), so a change of any of them starts the
// keys afresh.
func TestDefaultPrefix(t *testing.T) {
	c := shared.client(t)
	for _, tc := range []struct {
		typ  int
		name string
		l    keylimit.Limit
		want string
	}{
		{0, "login", keylimit.PerMinute(5), "keylimit:login:bucket:5/1m0s/5:"},
		{0, "api/v2", keylimit.PerSecond(10).WithBurst(20), "keylimit:api/v2:bucket:10/1s/20:"},
		{1, "login", keylimit.PerMinute(5), "keylimit:login:fixed:5/1m0s/5:"},
		{2, "Login_2.x:y-z", keylimit.PerHour(3), "keylimit:Login_2.x:y-z:sliding:3/1h0m0s/3:"},
	} {
		lim, err := constructors[tc.typ].new(c, tc.name, tc.l)
		require.NoError(t, err)
		require.Equal(t, tc.want, prefixOf(lim), "the default prefix of %s %q under %v", constructors[tc.typ].name, tc.name, tc.l)
	}
}

// TestNameErrors: a name must be given, short, and of letters, digits and
// - _ . : / (no braces: Redis Cluster would read a hash tag).
func TestNameErrors(t *testing.T) {
	c := shared.client(t)
	for _, tc := range []struct {
		name, want string
	}{
		{"", "redislimit: the limiter's name is empty"},
		{strings.Repeat("n", 101), "redislimit: the limiter's name is 101 bytes long, more than 100"},
		{"{tenant}", `redislimit: the limiter's name "{tenant}" holds '{'`},
		{"log in", `redislimit: the limiter's name "log in" holds ' '`},
		{"é", `redislimit: the limiter's name "é" holds 'é'`},
	} {
		for _, typ := range constructors {
			lim, err := typ.new(c, tc.name, keylimit.PerMinute(5))
			require.ErrorContains(t, err, tc.want, "%s named %q", typ.name, tc.name)
			require.Nil(t, lim, "%s named %q: a limiter came with the error", typ.name, tc.name)
		}
	}
	lim, err := constructors[0].new(c, strings.Repeat("n", 100), keylimit.PerMinute(5))
	require.NoError(t, err, "a name of 100 bytes")
	require.NotNil(t, lim)
}

// TestLongestDurations: every option that takes a duration takes the
// longest one, and the limiter decides exactly (issue 24.5:
// WithFailureBackoff's wrapped negative; see TestBackoffSaturates for it
// failing). A bucket whose lease time is that long leases at most half its
// span (a lease counts from its end), so at one instant it admits between
// half its burst, less the tenth that a lease's share leaves to others
// (DESIGN.md, "Leases"), and its burst.
func TestLongestDurations(t *testing.T) {
	c := shared.client(t)
	for _, opt := range []struct {
		name string
		opt  redislimit.Option
	}{
		{"WithTimeout", redislimit.WithTimeout(math.MaxInt64)},
		{"WithFailureBackoff", redislimit.WithFailureBackoff(math.MaxInt64)},
		{"WithLeases", redislimit.WithLeases(math.MaxInt64)},
	} {
		for _, typ := range types[:2] { // leases take no SlidingWindow
			t.Run(opt.name+"/"+typ.name, func(t *testing.T) {
				// A call slower than the default timeout (a busy machine) would
				// hand the decision to the failure policy, whose own bucket is
				// full: the longest timeout keeps every decision Redis's.
				lim, err := typ.new(c, keylimit.PerHour(100), redislimit.WithTimeout(math.MaxInt64), opt.opt, redislimit.WithDenyCacheSize(0))
				require.NoError(t, err)
				t.Cleanup(func() { lim.(io.Closer).Close() })
				key := testKey(t, "k")
				admitted := 0
				for range 150 {
					if lim.Allow(key) {
						admitted++
					}
				}
				if opt.name == "WithLeases" && typ.name == "TokenBucket" {
					require.True(t, admitted >= 40 && admitted <= 100, "admitted %d of 150 on 100 an hour", admitted)
					return
				}
				require.Equal(t, 100, admitted, "admitted of 150 on 100 an hour")
			})
		}
	}
}
