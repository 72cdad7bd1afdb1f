package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// The three-user scenario: alice, bob and charlie each send 8 rapid
// requests to a bucket of 5 refilling 1 a second: 5 pass, 3 are refused
// with Retry-After 1. 3 s later, each passes 3 more. Every response is
// checked field by field.
func TestThreeUsers(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{bucket(t, "burst", keylimit.PerSecond(1).WithBurst(5), mock)},
		OnDecision: seen.record,
	})(h))
	users := []string{"alice", "bob", "charlie"}

	// fire sends 8 requests as user and checks each answer: the first
	// `pass` are admitted, their RateLimit r counting down from r0, and t
	// always 1, the next token's; the rest are refused.
	fire := func(user string, pass, r0 int64) {
		t.Helper()
		for i := range int64(8) {
			got := get(t, srv.URL+"/", "X-User", user)
			f := policyFields(t, got.header)
			require.Len(t, f, 1)
			require.Equal(t, fields{"burst", 5, 5, max(r0-i, 0), 1}, f[0], "%s request %d", user, i+1)
			// The fields say what the limiter's Result said.
			d := seen.last()
			require.Equal(t, user, d.Key)
			require.Equal(t, int64(d.Result.Limit), f[0].q)
			require.Equal(t, int64(d.Result.Remaining), f[0].r)
			require.Equal(t, int64(math.Ceil(d.Result.RefillAfter.Seconds())), f[0].t)
			if !d.Result.Allowed {
				require.Equal(t, int(math.Ceil(d.Result.RetryAfter.Seconds())), retryAfter(t, got.header))
			}
			if i < pass {
				require.Equal(t, http.StatusOK, got.status, "%s request %d", user, i+1)
				require.Equal(t, "ok", got.body)
				require.Empty(t, got.header.Get("Retry-After"))
				continue
			}
			require.Equal(t, http.StatusTooManyRequests, got.status, "%s request %d", user, i+1)
			require.Equal(t, 1, retryAfter(t, got.header))
			require.Equal(t, "no-store", got.header.Get("Cache-Control"))
			require.Equal(t, "application/problem+json", got.header.Get("Content-Type"), "the client sent no Accept: any type")
			require.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["burst"],"retry_after_seconds":1,"policy":"burst","limit":5,"remaining":0}`, got.body)
		}
	}
	for _, u := range users {
		fire(u, 5, 4)
	}
	mock.Add(3 * time.Second)
	for _, u := range users {
		fire(u, 3, 2)
	}
	require.Equal(t, 3*(5+3), h.count(), "handler calls")

	all := seen.list()
	require.Len(t, all, 3*16)
	admitted := 0
	for i, d := range all {
		require.Equal(t, users[i/8%3], d.Key)
		require.Equal(t, "burst", d.Policy)
		require.Equal(t, 1, d.Cost)
		if d.Result.Allowed {
			admitted++
			require.Zero(t, d.Result.RetryAfter)
		} else {
			require.Equal(t, time.Second, d.Result.RetryAfter)
		}
	}
	require.Equal(t, 3*(5+3), admitted)
}

// Two named policies on one key: "minute" 3/min and "hour" 5/hour. A
// request refused by one takes nothing from the other. t: a minute bucket
// of 3 refills one every 20 s, an hour bucket of 5 one every 12 min.
func TestMinuteAndHour(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-Api-Key"),
		Policies: []quota.Policy{
			bucket(t, "minute", keylimit.PerMinute(3), mock),
			bucket(t, "hour", keylimit.PerHour(5), mock),
		},
		OnDecision: seen.record,
	})(&ok{}))
	runSteps(t, mock, srv.URL, []string{"X-Api-Key", "k1"}, []step{
		// t is until each one's next token (issue 23).
		{status: 200, fields: []fields{{"minute", 3, 60, 2, 20}, {"hour", 5, 3600, 4, 720}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 1, 20}, {"hour", 5, 3600, 3, 720}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 0, 20}, {"hour", 5, 3600, 2, 720}}},
		// The minute's next token is 20 s away; the refusal took nothing
		// from the hour.
		{status: 429, retryAfter: 20, fields: []fields{{"minute", 3, 60, 0, 20}, {"hour", 5, 3600, 2, 720}},
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["minute"],"retry_after_seconds":20,"policy":"minute","limit":3,"remaining":0}`},
		{advance: time.Minute, status: 200, fields: []fields{{"minute", 3, 60, 2, 20}, {"hour", 5, 3600, 1, 660}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 1, 20}, {"hour", 5, 3600, 0, 660}}},
		// The hour's 5 tokens are gone at 0:01; the first comes back at
		// 0:12. The refusal took nothing from the minute.
		{status: 429, retryAfter: 11 * 60, fields: []fields{{"minute", 3, 60, 1, 20}, {"hour", 5, 3600, 0, 11 * 60}},
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["hour"],"retry_after_seconds":660,"policy":"hour","limit":5,"remaining":0}`},
	})
	var refusedBy []string
	for _, d := range seen.list() {
		if !d.Result.Allowed {
			refusedBy = append(refusedBy, d.Policy)
		}
	}
	require.Equal(t, []string{"minute", "hour"}, refusedBy)
}

// The minute and the hour as windows: a FixedWindow of 3 a minute and a
// SlidingWindow of 5 an hour. w is each one's Period, t the time until it
// has more quota (the fixed window's end; the sliding window's oldest
// admission leaving it), and a request refused by one takes nothing from
// the other (both give back through Refund).
func TestMinuteAndHourWindows(t *testing.T) {
	mock := clock.NewMock() // at the Unix epoch: a minute window starts
	minute, err := keylimit.NewFixedWindow[string](keylimit.PerMinute(3), keylimit.WithClock(mock))
	require.NoError(t, err)
	hour, err := keylimit.NewSlidingWindow[string](keylimit.PerHour(5), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { minute.Close(); hour.Close() })
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-Api-Key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: minute}, {Name: "hour", Limiter: hour}},
	})(&ok{}))
	runSteps(t, mock, srv.URL, []string{"X-Api-Key", "k"}, []step{
		{advance: 10 * time.Second, status: 200, fields: []fields{{"minute", 3, 60, 2, 50}, {"hour", 5, 3600, 4, 3600}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 1, 50}, {"hour", 5, 3600, 3, 3600}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 0, 50}, {"hour", 5, 3600, 2, 3600}}},
		// the window ends at 1:00
		{status: 429, retryAfter: 50, fields: []fields{{"minute", 3, 60, 0, 50}, {"hour", 5, 3600, 2, 3600}}},
		// 1:00, a new minute window:
		{advance: 50 * time.Second, status: 200, fields: []fields{{"minute", 3, 60, 2, 60}, {"hour", 5, 3600, 1, 3550}}},
		{status: 200, fields: []fields{{"minute", 3, 60, 1, 60}, {"hour", 5, 3600, 0, 3550}}},
		// the first of the hour's 5 leaves its window at 1:00:10
		{status: 429, retryAfter: 3550, fields: []fields{{"minute", 3, 60, 1, 60}, {"hour", 5, 3600, 0, 3550}}},
	})
}

// LegacyFields adds X-RateLimit-* for the binding policy: Reset as the
// Unix time the quota is whole again, rounded up to a second (as GitHub,
// httprate and ulule send it), on the Clock given; with LegacyResetDelta,
// the seconds until then, rounded up. Here the clock starts half a second
// past 2026-03-01 12:00:00 UTC, Unix 1772366400.
func TestLegacyFields(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 5e8, time.UTC)
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "unix", true: "delta"}[delta], func(t *testing.T) {
			mock := clock.NewMock()
			mock.Set(start)
			srv := serve(t, limited(t, httplimit.Config{
				Key: httplimit.Header("X-User"),
				Policies: []quota.Policy{
					bucket(t, "second", keylimit.PerSecond(5), mock), // a token every 200 ms
					bucket(t, "minute", keylimit.PerMinute(5), mock), // a token every 12 s
				},
				LegacyFields:     true,
				LegacyResetDelta: delta,
				Clock:            mock,
			})(&ok{}))
			// reset is X-RateLimit-Reset: the Unix time, or with delta the
			// seconds, deltaSecs from now; unixSecs is the Unix time's offset
			// from 1772366400.
			reset := func(deltaSecs, unixSecs int64) string {
				if delta {
					return strconv.FormatInt(deltaSecs, 10)
				}
				return strconv.FormatInt(1772366400+unixSecs, 10)
			}
			runSteps(t, mock, srv.URL, []string{"X-User", "u"}, []step{
				// A tie at 4: the first policy binds, whole in 200 ms, at 12:00:00.7.
				{status: 200, fields: []fields{{"second", 5, 1, 4, 1}, {"minute", 5, 60, 4, 12}}, legacy: []string{"5", "4", reset(1, 1)}},
				{status: 200, fields: []fields{{"second", 5, 1, 3, 1}, {"minute", 5, 60, 3, 12}}, legacy: []string{"5", "3", reset(1, 1)}},
				// A second later: the second has 4, the minute 2, whole in
				// 35 s, at 12:00:36.5.
				{advance: time.Second, status: 200, fields: []fields{{"second", 5, 1, 4, 1}, {"minute", 5, 60, 2, 11}}, legacy: []string{"5", "2", reset(35, 37)}},
				{status: 200, fields: []fields{{"second", 5, 1, 3, 1}, {"minute", 5, 60, 1, 11}}, legacy: []string{"5", "1", reset(47, 49)}},
				{status: 200, fields: []fields{{"second", 5, 1, 2, 1}, {"minute", 5, 60, 0, 11}}, legacy: []string{"5", "0", reset(59, 61)}},
				// The minute's next token comes at 0:12.
				{status: 429, retryAfter: 11, fields: []fields{{"second", 5, 1, 2, 1}, {"minute", 5, 60, 0, 11}}, legacy: []string{"5", "0", reset(59, 61)},
					body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["minute"],"retry_after_seconds":11,"policy":"minute","limit":5,"remaining":0}`},
			})
		})
	}
}

// rateLimitFields are the names of every field the middleware may set.
var rateLimitFields = []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After", "Cache-Control"}

// The values of a response's fields are its own: a handler (or a Deny)
// that adds to each field, and then writes into every value it was given,
// changes no other field of its response, and nothing of another
// response's, though the values of one response share one array and
// RateLimit-Policy's value is reused from request to request; nor does
// the next request change what the handler kept.
func TestFieldValuesAreTheResponses(t *testing.T) {
	mock := clock.NewMock()
	var seen []http.Header // each response's fields, as they reached the handler or Deny
	var kept []http.Header // each response's values, the slices the middleware set
	tamper := func(h http.Header) {
		seen = append(seen, h.Clone())
		given := maps.Clone(h)
		kept = append(kept, given)
		for _, name := range rateLimitFields {
			if _, ok := h[name]; !ok {
				continue
			}
			before := h.Clone()
			h.Add(name, "added")
			require.Equal(t, append(before[name], "added"), h[name], name)
			delete(before, name)
			for other, vs := range before {
				require.Equal(t, vs, h[other], "%s changed when %s was added to", other, name)
			}
		}
		mark := "overwritten by response " + strconv.Itoa(len(kept))
		for _, vs := range given {
			for i := range vs {
				vs[i] = mark
			}
		}
	}
	h := limited(t, httplimit.Config{
		Key:          httplimit.Header("X-User"),
		Policies:     []quota.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
		LegacyFields: true,
		Clock:        mock, // at the Unix epoch: X-RateLimit-Reset is the seconds since it
		Deny: func(w http.ResponseWriter, _ *http.Request, _ quota.Decision) {
			tamper(w.Header())
			w.WriteHeader(http.StatusTooManyRequests)
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tamper(w.Header()) }))
	for range 3 {
		call(h, "/", "X-User", "u")
	}
	policy := []string{`"minute";q=2;w=60`}
	require.Equal(t, []http.Header{
		{"Ratelimit": {`"minute";r=1;t=30`}, "Ratelimit-Policy": policy,
			"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"30"}},
		{"Ratelimit": {`"minute";r=0;t=30`}, "Ratelimit-Policy": policy,
			"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"60"}},
		{"Ratelimit": {`"minute";r=0;t=30`}, "Ratelimit-Policy": policy,
			"X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"60"},
			"Retry-After": {"30"}, "Cache-Control": {"no-store"}},
	}, seen)
	for i, h := range kept {
		for name, vs := range h {
			require.Equal(t, slices.Repeat([]string{"overwritten by response " + strconv.Itoa(i+1)}, len(vs)), vs, name)
		}
	}
}

// Tiers: client-1 gets 10/min on /foo and 5/min on /bar, client-2 20/min
// and 10/min, anyone else 2/min on each. Each route has its own middleware,
// with one limiter per tier.
func TestTiers(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	route := func(one, two int) func(http.Handler) http.Handler {
		return limited(t, httplimit.Config{
			Key:      httplimit.Header("X-Client"),
			Policies: []quota.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
			Tier:     func(_ *http.Request, key string) string { return key },
			Tiers: map[string][]quota.Policy{
				"client-1": {bucket(t, "minute", keylimit.PerMinute(one), mock)},
				"client-2": {bucket(t, "minute", keylimit.PerMinute(two), mock)},
			},
			OnDecision: seen.record,
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /foo", route(10, 20)(&ok{}))
	mux.Handle("GET /bar", route(5, 10)(&ok{}))
	srv := serve(t, mux)

	want := map[string]map[string]int{
		"client-1": {"/foo": 10, "/bar": 5},
		"client-2": {"/foo": 20, "/bar": 10},
		"client-3": {"/foo": 2, "/bar": 2},
	}
	for client, routes := range want {
		for path, quota := range routes {
			passed := 0
			for range 25 {
				got := get(t, srv.URL+path, "X-Client", client)
				if got.status == http.StatusOK {
					passed++
				}
				f := policyFields(t, got.header)
				require.Equal(t, int64(quota), f[0].q, "%s %s", client, path)
			}
			require.Equal(t, quota, passed, "%s %s", client, path)
		}
	}
	tiers := map[string]string{}
	for _, d := range seen.list() {
		tiers[d.Key] = d.Tier
	}
	require.Equal(t, map[string]string{"client-1": "client-1", "client-2": "client-2", "client-3": ""}, tiers)
}

// An expensive endpoint costs 5 of a quota of 12 a minute (a token every
// 5 s); a cheap one 1. A request above the quota can never pass and is
// refused without Retry-After.
func TestCost(t *testing.T) {
	mock := clock.NewMock()
	limit := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{bucket(t, "minute", keylimit.PerMinute(12), mock)},
		Cost: func(r *http.Request) int {
			switch r.URL.Path {
			case "/expensive":
				return 5
			case "/huge":
				return 13
			case "/free":
				return 0
			}
			return 1
		},
	})
	srv := serve(t, limit(&ok{}))
	runSteps(t, mock, srv.URL, []string{"X-User", "alice"}, []step{
		// t: the next token, one every 5 s.
		{path: "/expensive", status: 200, fields: []fields{{"minute", 12, 60, 7, 5}}},
		{path: "/expensive", status: 200, fields: []fields{{"minute", 12, 60, 2, 5}}},
		// 2 left: not enough for 5, and none taken; 3 more come in 15 s.
		{path: "/expensive", status: 429, retryAfter: 15, fields: []fields{{"minute", 12, 60, 2, 5}}},
		{path: "/cheap", status: 200, fields: []fields{{"minute", 12, 60, 1, 5}}},
		{path: "/cheap", status: 200, fields: []fields{{"minute", 12, 60, 0, 5}}},
		{path: "/cheap", status: 429, retryAfter: 5, fields: []fields{{"minute", 12, 60, 0, 5}}},
		// costs nothing, so passes even now
		{path: "/free", status: 200, fields: []fields{{"minute", 12, 60, 0, 5}}},
		// A request that can never pass has no time to retry at, and
		// takes nothing.
		{advance: time.Minute, path: "/huge", status: 429, fields: []fields{{"minute", 12, 60, 12, 0}},
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"the request costs 13, more than policy \"minute\" admits at once (12): it can never pass","violated-policies":["minute"],"policy":"minute","limit":12,"remaining":12}`},
	})
	// The cost is charged in the refused case's Retry-After too: 5 tokens
	// of a 12/min bucket come back 5 × 5 s after the bucket is empty.
	runSteps(t, mock, srv.URL, []string{"X-User", "bob"}, []step{
		{path: "/expensive", status: 200, fields: []fields{{"minute", 12, 60, 7, 5}}},
		{path: "/expensive", status: 200, fields: []fields{{"minute", 12, 60, 2, 5}}},
		{path: "/cheap", status: 200, fields: []fields{{"minute", 12, 60, 1, 5}}},
		{path: "/cheap", status: 200, fields: []fields{{"minute", 12, 60, 0, 5}}},
		{path: "/expensive", status: 429, retryAfter: 25, fields: []fields{{"minute", 12, 60, 0, 5}}},
	})
}

// With several policies and a cost, the binding policy of a refusal is the
// first that cannot afford the cost (where keylimit.All stops), not merely
// the one with the least left; and a cost above any policy's quota can
// never pass, even when an earlier policy only lacks tokens now.
func TestCostAcrossPolicies(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key: httplimit.Header("X-User"),
		Policies: []quota.Policy{
			bucket(t, "ten", keylimit.PerMinute(10), mock), // a token every 6 s
			bucket(t, "seven", keylimit.PerMinute(7), mock),
		},
		Cost: func(r *http.Request) int {
			n, err := strconv.Atoi(r.Header.Get("X-Cost"))
			if err != nil {
				return -1 // answered 500, which no step expects
			}
			return n
		},
	})(&ok{}))
	runSteps(t, mock, srv.URL, []string{"X-User", "u"}, []step{
		// t: each one's next token, 6 s and 60/7 s away.
		{header: []string{"X-Cost", "6"}, status: 200, fields: []fields{{"ten", 10, 60, 4, 6}, {"seven", 7, 60, 1, 9}}},
		// ten lacks one token, 6 s away, and seven 4: Retry-After is not
		// before seven's next token either (its t).
		{header: []string{"X-Cost", "5"}, status: 429, retryAfter: 9, fields: []fields{{"ten", 10, 60, 4, 6}, {"seven", 7, 60, 1, 9}},
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit exceeded","violated-policies":["ten","seven"],"retry_after_seconds":9,"policy":"ten","limit":10,"remaining":4}`},
		{advance: time.Hour, header: []string{"X-Cost", "7"}, status: 200, fields: []fields{{"ten", 10, 60, 3, 6}, {"seven", 7, 60, 0, 9}}},
		// ten refuses for now; seven never can
		{header: []string{"X-Cost", "8"}, status: 429, fields: []fields{{"ten", 10, 60, 3, 6}, {"seven", 7, 60, 0, 9}},
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"the request costs 8, more than policy \"seven\" admits at once (7): it can never pass","violated-policies":["ten","seven"],"policy":"seven","limit":7,"remaining":0}`},
	})
}

// A skipped request passes untouched: no key, no count, no fields, no
// decision.
func TestSkip(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(1), mock)},
		Skip:       func(r *http.Request) bool { return r.URL.Path == "/healthz" },
		OnDecision: seen.record,
	})
	srv := serve(t, limit(&ok{}))
	for range 5 {
		got := get(t, srv.URL+"/healthz") // no X-User: not even keyed
		require.Equal(t, http.StatusOK, got.status)
		require.Empty(t, got.header.Values("RateLimit"))
		require.Empty(t, got.header.Values("RateLimit-Policy"))
	}
	require.Empty(t, seen.list())
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/api", "X-User", "u").status)
	require.Equal(t, http.StatusTooManyRequests, get(t, srv.URL+"/api", "X-User", "u").status)
	require.Equal(t, http.StatusOK, get(t, srv.URL+"/healthz", "X-User", "u").status)
	require.Len(t, seen.list(), 2)
}

// Dry run: every request passes, the fields tell the truth, and OnDecision
// sees the refusals that enforcement would make.
func TestDryRun(t *testing.T) {
	mock := clock.NewMock()
	seen := &decisions{}
	h := &ok{}
	limit := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(2), mock)},
		DryRun:     true,
		OnDecision: seen.record,
	})
	srv := serve(t, limit(h))
	var rs []int64
	for range 5 {
		got := get(t, srv.URL, "X-User", "u")
		require.Equal(t, http.StatusOK, got.status)
		require.Empty(t, got.header.Get("Retry-After"))
		require.Empty(t, got.header.Get("Cache-Control"))
		rs = append(rs, policyFields(t, got.header)[0].r)
	}
	require.Equal(t, []int64{1, 0, 0, 0, 0}, rs)
	require.Equal(t, 5, h.count())
	var allowed []bool
	for _, d := range seen.list() {
		allowed = append(allowed, d.Result.Allowed)
		if !d.Result.Allowed {
			require.Equal(t, 30*time.Second, d.Result.RetryAfter)
		}
	}
	require.Equal(t, []bool{true, true, false, false, false}, allowed)

	// A refusal in dry run counts nothing: after 30 s one token is back.
	mock.Add(30 * time.Second)
	require.Equal(t, int64(0), policyFields(t, get(t, srv.URL, "X-User", "u").header)[0].r)
	require.True(t, seen.list()[5].Result.Allowed)
}

// Many goroutines on a few keys, on a frozen clock: each key admits exactly
// its burst, no more, no less, and OnDecision sees every decision once.
func TestConcurrentRequestsCountExactly(t *testing.T) {
	const (
		keys       = 4
		burst      = 100
		goroutines = 32
		perG       = 50 // 1600 requests, 400 a key
	)
	mock := clock.NewMock()
	var mu sync.Mutex
	admittedBy := map[string]int{}
	decided := 0
	h := &ok{}
	limit := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{bucket(t, "burst", keylimit.PerHour(burst), mock)},
		OnDecision: func(_ *http.Request, d quota.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decided++
			if d.Result.Allowed {
				admittedBy[d.Key]++
			}
		},
	})(h)
	statuses := make([]map[int]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		statuses[g] = map[int]int{}
		wg.Go(func() {
			for i := range perG {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-User", strconv.Itoa((g+i)%keys))
				w := httptest.NewRecorder()
				limit.ServeHTTP(w, r)
				statuses[g][w.Code]++
			}
		})
	}
	wg.Wait()
	total := map[int]int{}
	for _, s := range statuses {
		for code, n := range s {
			total[code] += n
		}
	}
	require.Equal(t, map[int]int{200: keys * burst, 429: goroutines*perG - keys*burst}, total)
	require.Equal(t, map[string]int{"0": burst, "1": burst, "2": burst, "3": burst}, admittedBy)
	require.Equal(t, goroutines*perG, decided)
	require.Equal(t, keys*burst, h.count())
}

// The same over real connections: 20 clients at once, one key.
func TestConcurrentRequestsOverTheWire(t *testing.T) {
	mock := clock.NewMock()
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.ClientIP{}.Key,
		Policies: []quota.Policy{bucket(t, "burst", keylimit.PerHour(37), mock)},
	})(&ok{}))
	got := storm(&http.Client{}, srv.URL, 20, 10)
	require.Empty(t, got.errs)
	require.Equal(t, map[int]int{200: 37, 429: 200 - 37}, got.byStatus)
}

// A SlidingCounter counts for a policy like any limiter: its w is its
// Period.
func TestSlidingCounterPolicy(t *testing.T) {
	mock := clock.NewMock()
	counter, err := keylimit.NewSlidingCounter[string](keylimit.PerMinute(2), keylimit.WithClock(mock))
	require.NoError(t, err)
	t.Cleanup(func() { counter.Close() })
	srv := serve(t, limited(t, httplimit.Config{
		Key:      httplimit.Header("X-Api-Key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: counter}},
	})(&ok{}))
	var statuses []int
	for range 3 {
		got := get(t, srv.URL, "X-Api-Key", "k")
		statuses = append(statuses, got.status)
		f := policyFields(t, got.header)
		require.Equal(t, int64(2), f[0].q)
		require.Equal(t, int64(60), f[0].w)
	}
	require.Equal(t, []int{200, 200, 429}, statuses)
}

// TestContextReachesTheLimiters is issue 15's context end to end: a limiter
// that takes a context is asked under the request's, alone or behind
// keylimit.All; a request whose client hung up asks no limiter at all (no
// Redis call), reaches neither the handler nor OnDecision, and is answered
// by Error with the context's error (503 by default).
func TestContextReachesTheLimiters(t *testing.T) {
	mock := clock.NewMock()
	for _, tc := range []struct {
		name     string
		policies func(*contextLimiter) []quota.Policy
	}{
		{"one policy", func(l *contextLimiter) []quota.Policy {
			return []quota.Policy{{Name: "remote", Limiter: l, Window: time.Minute}}
		}},
		{"behind keylimit.All", func(l *contextLimiter) []quota.Policy {
			return []quota.Policy{bucket(t, "local", keylimit.PerMinute(10), mock), {Name: "remote", Limiter: l, Window: time.Minute}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := &contextLimiter{}
			h := &ok{}
			seen := &decisions{}
			var errs []error
			config := httplimit.Config{Key: httplimit.Header("X-User"), Policies: tc.policies(lim), OnDecision: seen.record}
			plain := limited(t, config)(h)
			config.Error = func(w http.ResponseWriter, r *http.Request, err error) {
				errs = append(errs, err)
				w.WriteHeader(499)
			}
			custom := limited(t, config)(h)

			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-User", "u")
			r = r.WithContext(context.WithValue(r.Context(), ctxMark{}, "the request's"))
			w := httptest.NewRecorder()
			plain.ServeHTTP(w, r)
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, []any{"the request's"}, lim.marks())

			hungUp, cancel := context.WithCancel(r.Context())
			cancel()
			w = httptest.NewRecorder()
			plain.ServeHTTP(w, r.WithContext(hungUp))
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
			require.JSONEq(t, `{"error":"httplimit: the request ended before its rate limit was decided"}`, w.Body.String())
			w = httptest.NewRecorder()
			custom.ServeHTTP(w, r.WithContext(hungUp))
			require.Equal(t, 499, w.Code)
			require.Len(t, errs, 1)
			require.ErrorIs(t, errs[0], context.Canceled)
			require.EqualError(t, errs[0], "httplimit: the request ended before its rate limit was decided: context canceled")

			require.Equal(t, []any{"the request's"}, lim.marks(), "no limiter asked for a client that hung up")
			require.Equal(t, 1, h.count())
			require.Len(t, seen.list(), 1, "not a decision")
		})
	}
}

// TestContextEndsDuringTheDecision: a limiter that returns because the
// request's context ended while it decided (a Redis call cut short) makes
// no decision: the answer is Error's, not a 429. An error while the context
// is alive is a failure policy's: its Result is the decision.
func TestContextEndsDuringTheDecision(t *testing.T) {
	h := &ok{}
	var cancel context.CancelFunc
	lim := &contextLimiter{take: func(ctx context.Context) (keylimit.Result, error) {
		cancel() // the client hangs up while the limiter decides
		return keylimit.Result{Limit: 5}, ctx.Err()
	}}
	seen := &decisions{}
	mw := limited(t, httplimit.Config{
		Key:        httplimit.Header("X-User"),
		Policies:   []quota.Policy{{Name: "remote", Limiter: lim, Window: time.Minute}},
		OnDecision: seen.record,
	})(h)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-User", "u")
	ctx, cancelRequest := context.WithCancel(r.Context())
	defer cancelRequest()
	cancel = cancelRequest
	w := httptest.NewRecorder()
	mw.ServeHTTP(w, r.WithContext(ctx))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Empty(t, seen.list())

	lim.take = func(context.Context) (keylimit.Result, error) {
		return keylimit.Result{Allowed: true, Limit: 5, Remaining: 4}, errors.New("redislimit: Redis is down: FailLocal decided")
	}
	w = httptest.NewRecorder()
	mw.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, `"remote";r=4;t=0`, w.Header().Get("RateLimit"))
	require.Len(t, seen.list(), 1)
	require.Equal(t, 1, h.count())
}

// TestEachPolicyAskedOnce is issue 15's one call per decision: with two
// policies, an admitted request asks each limiter once (keylimit.All's
// TakeEach reports each policy's Result; no Peek after it). A refused one
// asks the first to admit, give back and tell its state, the second once.
func TestEachPolicyAskedOnce(t *testing.T) {
	mock := clock.NewMock()
	first := &countingBucket{TokenBucket: newBucket(t, keylimit.PerMinute(10), mock)}
	second := &countingBucket{TokenBucket: newBucket(t, keylimit.PerHour(1), mock)}
	h := limited(t, httplimit.Config{
		Key:      httplimit.Header("X-User"),
		Policies: []quota.Policy{{Name: "minute", Limiter: first}, {Name: "hour", Limiter: second}},
	})(&ok{})

	resp := call(h, "/", "X-User", "u")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []string{"Admit"}, first.called())
	require.Equal(t, []string{"Take"}, second.called())
	require.Equal(t, []fields{{"minute", 10, 60, 9, 6}, {"hour", 1, 3600, 0, 3600}}, policyFields(t, resp.Header))

	resp = call(h, "/", "X-User", "u")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, []string{"Admit", "Refund", "Peek"}, first.called())
	require.Equal(t, []string{"Take"}, second.called())
	require.Equal(t, []fields{{"minute", 10, 60, 9, 6}, {"hour", 1, 3600, 0, 3600}}, policyFields(t, resp.Header))
}

// TestDecisionElapsed is issue 17's hook: Decision.Elapsed is the time the
// key and the limiters took, measured when OnDecision is set; without it,
// 0.
func TestDecisionElapsed(t *testing.T) {
	const keyTime, takeTime = 20 * ms, 30 * ms
	slowKey := func(r *http.Request) (string, error) {
		time.Sleep(keyTime)
		return "k", nil
	}
	lim := &contextLimiter{take: func(context.Context) (keylimit.Result, error) {
		time.Sleep(takeTime)
		return keylimit.Result{Allowed: true, Limit: 1, Remaining: 1}, nil
	}}
	seen := &decisions{}
	var denied []quota.Decision
	config := httplimit.Config{
		Key:        slowKey,
		Policies:   []quota.Policy{{Name: "slow", Limiter: lim, Window: time.Minute}},
		OnDecision: seen.record,
	}
	require.Equal(t, http.StatusOK, call(limited(t, config)(&ok{}), "/").StatusCode)
	require.GreaterOrEqual(t, seen.last().Elapsed, keyTime+takeTime)

	lim.take = func(context.Context) (keylimit.Result, error) { return keylimit.Result{Limit: 1}, nil }
	config.OnDecision = nil
	config.Deny = func(w http.ResponseWriter, r *http.Request, d quota.Decision) { denied = append(denied, d) }
	call(limited(t, config)(&ok{}), "/")
	require.Len(t, denied, 1)
	require.Zero(t, denied[0].Elapsed, "not measured without OnDecision")
}

// FieldsOnRefusal: an admitted response carries none of the rate-limit
// fields, legacy ones included; a refused one carries every field as
// without it, with the same values (the same limiter state underneath),
// and a dry run sends them on the requests it would have refused.
func TestFieldsOnRefusal(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("dryRun=%v", dryRun), func(t *testing.T) {
			mock := clock.NewMock()
			config := func(fieldsOnRefusal bool) httplimit.Config {
				return httplimit.Config{
					Key: httplimit.Header("X-User"),
					Policies: []quota.Policy{
						bucket(t, "second", keylimit.PerSecond(10), mock),
						bucket(t, "minute", keylimit.PerMinute(2), mock),
					},
					LegacyFields: true, Clock: mock, DryRun: dryRun, FieldsOnRefusal: fieldsOnRefusal,
				}
			}
			quiet, full := serve(t, limited(t, config(true))(&ok{})), serve(t, limited(t, config(false))(&ok{}))
			for i := range 4 {
				got, want := get(t, quiet.URL, "X-User", "u"), get(t, full.URL, "X-User", "u")
				require.Equal(t, want.status, got.status, "request %d", i)
				if i < 2 { // admitted
					for _, f := range rateLimitFields {
						require.Empty(t, got.header.Values(f), "request %d, admitted: %s", i, f)
					}
					require.NotEmpty(t, want.header.Values("Ratelimit"), "request %d without FieldsOnRefusal", i)
					continue
				}
				for _, f := range rateLimitFields {
					require.Equal(t, want.header.Values(f), got.header.Values(f), "request %d, refused: %s", i, f)
				}
				require.NotEmpty(t, got.header.Values("Ratelimit"), "request %d, refused", i)
				require.Equal(t, want.body, got.body, "request %d", i)
			}
		})
	}
}
