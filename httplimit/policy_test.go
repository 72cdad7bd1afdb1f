package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

func TestFieldsFromAnyLimiter(t *testing.T) {
	lim := &scripted{}
	h := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "k", nil },
		Policies: []quota.Policy{{Name: `odd "name" \ here`, Limiter: lim}},
	})(&ok{})
	for _, c := range []struct {
		name       string
		result     keylimit.Result
		limit      keylimit.Limit
		q, w, r, t int64
		retryAfter string // "" when admitted
	}{
		{"a window: w is its Period", keylimit.Result{Allowed: true, Limit: 100, Remaining: 99, RefillAfter: 1500 * time.Millisecond, ResetAfter: 1500 * time.Millisecond},
			keylimit.Per(100, time.Hour), 100, 3600, 99, 2, ""},
		{"a changed limit changes RateLimit-Policy", keylimit.Result{Allowed: true, Limit: 7, Remaining: 6, RefillAfter: time.Second, ResetAfter: time.Second},
			keylimit.Per(7, 90*time.Second), 7, 90, 6, 1, ""},
		{"negatives are 0", keylimit.Result{Allowed: true, Limit: 7, Remaining: -3, RefillAfter: -time.Second, ResetAfter: -time.Second},
			keylimit.Per(7, 1500*time.Millisecond), 7, 2, 0, 0, ""},
		{"refused with RetryAfter 0: Retry-After 1, never 0", keylimit.Result{Limit: 7, RefillAfter: time.Millisecond, ResetAfter: time.Millisecond},
			keylimit.Per(7, time.Minute), 7, 60, 0, 1, "1"},
		{"Retry-After rounds up", keylimit.Result{Limit: 7, RetryAfter: 1200 * time.Millisecond, RefillAfter: 1200 * time.Millisecond, ResetAfter: 3 * time.Second},
			keylimit.Per(7, time.Minute), 7, 60, 0, 2, "2"},
		{"t is at most w", keylimit.Result{Allowed: true, Limit: 7, RefillAfter: 2 * time.Minute, ResetAfter: 3 * time.Minute},
			keylimit.Per(7, time.Minute), 7, 60, 0, 60, ""},
		{"Retry-After is not before t", keylimit.Result{Limit: 7, RetryAfter: time.Second, RefillAfter: 5 * time.Second, ResetAfter: 9 * time.Second},
			keylimit.Per(7, time.Minute), 7, 60, 0, 5, "5"},
		{"an Integer has at most 15 digits", keylimit.Result{Allowed: true, Limit: 1 << 62, Remaining: 1 << 61, RefillAfter: 1 << 62, ResetAfter: 1 << 62},
			keylimit.Per(1, 1<<62), 999_999_999_999_999, 4611686019, 999_999_999_999_999, 4611686019, ""},
	} {
		lim.set(c.result, c.limit)
		w := call(h, "/")
		f := policyFields(t, w.Header)
		require.Equal(t, []fields{{`odd "name" \ here`, c.q, c.w, c.r, c.t}}, f, c.name)
		require.Equal(t, c.retryAfter, w.Header.Get("Retry-After"), c.name)
	}
	lim.set(keylimit.Result{Allowed: true, Limit: 7}, keylimit.PerMinute(7))
	require.Equal(t, `"odd \"name\" \\ here";q=7;w=60`, call(h, "/").Header.Get("RateLimit-Policy"))
}

// w for a token bucket is the time an empty bucket takes to refill fully.
func TestBucketWindow(t *testing.T) {
	mock := clock.NewMock()
	for _, c := range []struct {
		limit keylimit.Limit
		q, w  int64
	}{
		{keylimit.PerMinute(10), 10, 60},
		{keylimit.PerSecond(1).WithBurst(5), 5, 5},
		{keylimit.PerMinute(60).WithBurst(10), 10, 10},
		{keylimit.PerSecond(3), 3, 1}, // not 2: Burst × Interval would be 1.000000002 s
		{keylimit.PerHour(500), 500, 3600},
		{keylimit.Per(3, 10*time.Second).WithBurst(1), 1, 4}, // 3.34 s, rounded up
		{keylimit.Per(10, time.Millisecond), 10, 1},
	} {
		h := limited(t, httplimit.Config{
			Key:      func(*http.Request) (string, error) { return "k", nil },
			Policies: []quota.Policy{bucket(t, "p", c.limit, mock)},
		})(&ok{})
		f := policyFields(t, call(h, "/").Header)
		require.Equal(t, c.q, f[0].q, "%v", c.limit)
		require.Equal(t, c.w, f[0].w, "%v", c.limit)
	}
	// Window, when set, is what w says.
	h := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "k", nil },
		Policies: []quota.Policy{{Name: "p", Limiter: &noLimit{}, Window: 1500 * time.Millisecond}},
	})(&ok{})
	require.Equal(t, int64(2), policyFields(t, call(h, "/").Header)[0].w)
}

func TestNewErrors(t *testing.T) {
	mock := clock.NewMock()
	key := httplimit.Header("X-User")
	p := func(name string) quota.Policy { return bucket(t, name, keylimit.PerMinute(1), mock) }
	for _, c := range []struct {
		config httplimit.Config
		want   string
	}{
		{httplimit.Config{Policies: []quota.Policy{p("a")}},
			"httplimit: Config.Key is nil: say what to key requests by, e.g. httplimit.ClientIP{}.Key"},
		{httplimit.Config{Key: key},
			"httplimit: Config.Policies is empty: give at least one Policy"},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("")}},
			"httplimit: a policy has no name"},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("minüte")}},
			`httplimit: policy name "minüte" has a byte 0xc3 a Structured Field String cannot hold (printable ASCII only)`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a"), p("a")}},
			`httplimit: two policies are named "a"`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{{Name: "a"}}},
			`httplimit: policy "a" has no Limiter`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{{Name: "a", Limiter: &scripted{}, Window: -time.Second}}},
			`httplimit: policy "a": Window -1s is negative`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{{Name: "a", Limiter: &noLimit{}}}},
			`httplimit: policy "a": set its Window: the limiter (*httplimit_test.noLimit) does not report its Limit`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{{Name: "a", Limiter: &scripted{}}, p("b")}},
			`httplimit: policy "a": its limiter (*httplimit_test.scripted) cannot Refund, so it must be the last policy`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{quota.Bucket("a", keylimit.PerMinute(0))}},
			`httplimit: policy "a": keylimit: events 0 is below 1`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{quota.Bucket("a", keylimit.PerMinute(1), keylimit.WithClock(nil))}},
			`httplimit: policy "a": keylimit: WithClock(nil): pass clock.New() for real time`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}, Tier: func(*http.Request, string) string { return "" }},
			"httplimit: Config.Tier and Config.Tiers go together: set both or neither"},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}, Tiers: map[string][]quota.Policy{"gold": {p("a")}}},
			"httplimit: Config.Tier and Config.Tiers go together: set both or neither"},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}, Tier: func(*http.Request, string) string { return "" }, Tiers: map[string][]quota.Policy{"": {p("a")}}},
			`httplimit: Config.Tiers has a tier named "": Config.Policies is that tier`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}, Tier: func(*http.Request, string) string { return "" }, Tiers: map[string][]quota.Policy{"gold": nil}},
			`httplimit: tier "gold" has no policies (tier "gold")`},
		{httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}, Tier: func(*http.Request, string) string { return "" }, Tiers: map[string][]quota.Policy{"gold": {p("a"), p("a")}}},
			`httplimit: two policies are named "a" (tier "gold")`},
	} {
		mw, err := httplimit.New(c.config)
		require.Nil(t, mw)
		require.EqualError(t, err, c.want)
	}
	require.PanicsWithValue(t, "httplimit: the middleware cannot wrap a nil http.Handler", func() {
		limited(t, httplimit.Config{Key: key, Policies: []quota.Policy{p("a")}})(nil)
	})
	require.PanicsWithValue(t, "httplimit: Join needs at least one KeyFunc", func() { httplimit.Join() })
	require.PanicsWithValue(t, "httplimit: Join: KeyFunc 1 is nil", func() { httplimit.Join(key, nil) })
}

// The last policy alone may lack Refund: All never needs to undo it.
func TestLastPolicyNeedNotRefund(t *testing.T) {
	lim := &scripted{}
	lim.set(keylimit.Result{Limit: 4, RetryAfter: time.Second}, keylimit.PerMinute(4))
	mock := clock.NewMock()
	b := bucket(t, "first", keylimit.PerMinute(10), mock)
	h := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "k", nil },
		Policies: []quota.Policy{b, {Name: "last", Limiter: lim}},
	})(&ok{})
	w := call(h, "/")
	require.Equal(t, http.StatusTooManyRequests, w.StatusCode)
	require.Equal(t, []fields{{"first", 10, 60, 10, 0}, {"last", 4, 60, 0, 0}}, policyFields(t, w.Header), "the first gave back what it took")
}

// SetLimit shows in the next response's RateLimit-Policy.
func TestSetLimitShows(t *testing.T) {
	mock := clock.NewMock()
	b, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	require.NoError(t, err)
	h := limited(t, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "k", nil },
		Policies: []quota.Policy{{Name: "p", Limiter: b}},
	})(&ok{})
	require.Equal(t, `"p";q=10;w=60`, call(h, "/").Header.Get("RateLimit-Policy"))
	require.NoError(t, b.SetLimit(keylimit.PerHour(100).WithBurst(20)))
	require.Equal(t, `"p";q=20;w=720`, call(h, "/").Header.Get("RateLimit-Policy"))
}

// A key whose limit (from SetKeyLimit's function) is invalid is the
// server's error, 500, not a 429; in dry run it passes.
func TestInvalidKeyLimit(t *testing.T) {
	mock := clock.NewMock()
	b, err := keylimit.NewTokenBucket[string](keylimit.PerMinute(10), keylimit.WithClock(mock))
	require.NoError(t, err)
	require.NoError(t, b.SetKeyLimit(func(key string) keylimit.Limit {
		if key == "bad" {
			return keylimit.PerMinute(-1)
		}
		return keylimit.Limit{}
	}))
	other := bucket(t, "first", keylimit.PerMinute(100), mock)
	var errs []error
	seen := &decisions{}
	config := httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{other, {Name: "keyed", Limiter: b}},
		OnDecision: seen.record,
		Error: func(w http.ResponseWriter, r *http.Request, err error) {
			errs = append(errs, err)
			w.WriteHeader(http.StatusInternalServerError)
		},
	}
	h := limited(t, config)(&ok{})
	require.Equal(t, http.StatusOK, call(h, "/", "X-User", "good").StatusCode)
	require.Equal(t, http.StatusInternalServerError, call(h, "/", "X-User", "bad").StatusCode)
	require.Len(t, errs, 1)
	require.Equal(t, `httplimit: policy "keyed" cannot limit key "bad": keylimit: the per-key limit function gave this key an invalid limit: keylimit: events -1 is below 1`, errs[0].Error())
	require.Len(t, seen.list(), 1, "an undecided request is not a decision")

	config.DryRun = true
	h = limited(t, config)(&ok{})
	resp := call(h, "/", "X-User", "bad")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	d := seen.list()[1]
	require.Equal(t, "keyed", d.Policy)
	require.False(t, d.Result.Allowed)
	require.Error(t, d.Result.Err)
	require.Equal(t, int64(100), policyFields(t, resp.Header)[0].r, "the first policy gave back what it took")
}

// keyLimited is a limiter that reports the limit of each key, as the
// limiters of keylimit do after SetKeyLimit: LimitOf.
type keyLimited struct {
	scripted
	limits map[string]keylimit.Limit
}

func (k *keyLimited) Take(key string, n int) keylimit.Result {
	l := k.LimitOf(key)
	return keylimit.Result{Allowed: true, Limit: l.BurstSize(), Remaining: l.BurstSize() - n}
}

func (k *keyLimited) LimitOf(key string) keylimit.Limit {
	if l, ok := k.limits[key]; ok {
		return l
	}
	return k.Limit()
}

// A limiter that reports each key's own limit (LimitOf) gets each key's w
// in RateLimit-Policy, not the limiter's: a key given an hourly limit by
// SetKeyLimit announces w=3600 beside the default's w=60.
func TestKeyLimitWindow(t *testing.T) {
	lim := &keyLimited{limits: map[string]keylimit.Limit{"gold": keylimit.PerHour(1000)}}
	lim.set(keylimit.Result{}, keylimit.PerMinute(10))
	h := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{{Name: "quota", Limiter: lim}},
	})(&ok{})
	for _, c := range []struct{ user, policy string }{
		{"gold", `"quota";q=1000;w=3600`},
		{"free", `"quota";q=10;w=60`},
		{"gold", `"quota";q=1000;w=3600`},
	} {
		require.Equal(t, c.policy, call(h, "/", "X-User", c.user).Header.Get("RateLimit-Policy"), c.user)
	}

	// LimitOf alone, without Limit, is enough to derive w.
	only := struct {
		keylimit.Limiter[string]
		limitOfReporter
	}{lim, lim}
	h = limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{{Name: "quota", Limiter: only}},
	})(&ok{})
	require.Equal(t, `"quota";q=1000;w=3600`, call(h, "/", "X-User", "gold").Header.Get("RateLimit-Policy"))
}

type limitOfReporter interface {
	LimitOf(key string) keylimit.Limit
}
