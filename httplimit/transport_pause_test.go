package httplimit

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/stretchr/testify/require"
)

func TestServerPause(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := func(d time.Duration) time.Time { return now.Add(d) }
	never := time.Time{}
	for _, tc := range []struct {
		name   string
		status int
		fields []string // name, value, name, value...
		want   time.Time
	}{
		{"429 Retry-After seconds", 429, []string{"Retry-After", "2"}, in(2 * time.Second)},
		{"503 Retry-After seconds", 503, []string{"Retry-After", " 120 "}, in(2 * time.Minute)},
		{"429 Retry-After HTTP-date", 429, []string{"Retry-After", "Sun, 01 Mar 2026 12:00:30 GMT"}, in(30 * time.Second)},
		{"429 Retry-After obsolete RFC 850 date", 429, []string{"Retry-After", "Sunday, 01-Mar-26 12:01:00 GMT"}, in(time.Minute)},
		{"429 Retry-After date in the past", 429, []string{"Retry-After", "Sun, 01 Mar 2026 11:00:00 GMT"}, never},
		{"429 Retry-After 0", 429, []string{"Retry-After", "0"}, never},
		{"429 Retry-After huge is bounded", 429, []string{"Retry-After", "99999999999999999999999"}, in(maxServerPause)},
		{"429 Retry-After negative is invalid", 429, []string{"Retry-After", "-5"}, never},
		{"429 Retry-After fraction is invalid", 429, []string{"Retry-After", "1.5"}, never},
		{"429 Retry-After huge then not a digit is invalid", 429, []string{"Retry-After", "18700000000000000000A"}, never},
		{"429 without fields", 429, nil, never},
		{"200 Retry-After is not a pause", 200, []string{"Retry-After", "5"}, never},
		{"500 Retry-After is not a pause", 500, []string{"Retry-After", "5"}, never},
		{"Retry-After wins over RateLimit", 429, []string{"Retry-After", "3", "RateLimit", `"m";r=0;t=50`}, in(3 * time.Second)},
		{"invalid Retry-After falls back to RateLimit", 429, []string{"Retry-After", "soon", "RateLimit", `"m";r=0;t=50`}, in(50 * time.Second)},
		{"429 RateLimit r=0", 429, []string{"RateLimit", `"minute";r=0;t=42`}, in(42 * time.Second)},
		{"429 RateLimit largest t with r=0", 429, []string{"RateLimit", `"minute";r=0;t=42, "hour";r=0;t=600, "day";r=5;t=9000`}, in(600 * time.Second)},
		{"429 RateLimit without r=0 takes the largest t", 429, []string{"RateLimit", `"minute";r=3;t=7, "hour";r=1;t=9`}, in(9 * time.Second)},
		{"200 RateLimit r=0 pauses", 200, []string{"RateLimit", `"minute";r=0;t=5`}, in(5 * time.Second)},
		{"200 RateLimit r>0 does not", 200, []string{"RateLimit", `"minute";r=1;t=5`}, never},
		{"200 RateLimit r=0 without t does not", 200, []string{"RateLimit", `"minute";r=0`}, never},
		{"RateLimit over two field lines", 200, []string{"RateLimit", `"minute";r=4;t=5`, "RateLimit", `"hour";r=0;t=70`}, in(70 * time.Second)},
		{"RateLimit parameters in any order", 200, []string{"RateLimit", `"default";t=8;r=0`}, in(8 * time.Second)},
		// Issue 23: a member that is not a String names no policy.
		{"RateLimit token name is not a policy", 200, []string{"RateLimit", `default;t=8;r=0`}, never},
		{"RateLimit inner list is not a policy", 429, []string{"RateLimit", `("p");r=0;t=2`}, never},
		{"RateLimit string with comma and semicolon", 200, []string{"RateLimit", `"a,b;r=9";r=0;t=6`}, in(6 * time.Second)},
		{"RateLimit escaped quote in string", 200, []string{"RateLimit", `"a\"b";r=0;t=4`}, in(4 * time.Second)},
		{"RateLimit other parameters skipped", 200, []string{"RateLimit", `"m";pk=:cHsx:;r=0;x="y;z";t=11`}, in(11 * time.Second)},
		{"RateLimit t not an Integer is absent", 200, []string{"RateLimit", `"m";r=0;t=oops, "h";r=0;t=12`}, in(12 * time.Second)},
		// Issue 23: a field that is not a valid List is ignored whole.
		{"RateLimit garbage after a member ignores the field", 200, []string{"RateLimit", `"m";r=0;t=99 junk, "h";r=0;t=13`}, never},
		{"RateLimit trailing comma ignores the field", 429, []string{"RateLimit", `"p";r=0;t=2,`}, never},
		{"RateLimit leading comma ignores the field", 429, []string{"RateLimit", `,"p";r=0;t=2`}, never},
		{"RateLimit non-ASCII ignores the field", 429, []string{"RateLimit", `"é";r=0;t=2`}, never},
		{"RateLimit bad base64 ignores the field", 429, []string{"RateLimit", `"p";r=0;t=2;pk=:A=:`}, never},
		{"RateLimit malformed second line ignores the first", 200, []string{"RateLimit", `"minute";r=0;t=5`, "RateLimit", `"hour";r=0;t=70;`}, never},
		{"RateLimit unterminated string", 200, []string{"RateLimit", `"m;r=0;t=5`}, never},
		{"RateLimit decimal t is not an Integer", 200, []string{"RateLimit", `"m";r=0;t=5.5`}, never},
		{"RateLimit negative t", 429, []string{"RateLimit", `"m";r=0;t=-5`}, never},
		{"RateLimit inner list beside a policy", 200, []string{"RateLimit", `("a" "b";q=1);r=0;t=14, "h";r=0;t=4`}, in(4 * time.Second)},
		{"RateLimit empty", 200, []string{"RateLimit", ``}, never},
		{"RateLimit -0 is 0", 200, []string{"RateLimit", `"m";r=-0;t=6`}, in(6 * time.Second)},
		// Issue 13, defect 1: inner lists do not nest (RFC 9651).
		{"RateLimit inner list inside an inner list", 200, []string{"RateLimit", `("a" ("b"));r=0;t=14`}, never},
		{"RateLimit nested inner list ignores the field", 200, []string{"RateLimit", `(("a"));r=0;t=14, "h";r=0;t=3`}, never},
		{"RateLimit inner list as a parameter value", 200, []string{"RateLimit", `"m";r=(0);t=5`}, never},
		// Issue 13, defect 5: t from 9,223,372,037 on wrapped around.
		{"RateLimit t below the cap", 200, []string{"RateLimit", `"m";r=0;t=999999999`}, in(999999999 * time.Second)},
		{"RateLimit t=9223372037 is capped", 200, []string{"RateLimit", `"m";r=0;t=9223372037`}, in(maxServerPause)},
		{"RateLimit t=10000000000 is capped", 200, []string{"RateLimit", `"m";r=0;t=10000000000`}, in(maxServerPause)},
		{"RateLimit t=18446744074 is capped", 429, []string{"RateLimit", `"m";r=0;t=18446744074`}, in(maxServerPause)},
		{"RateLimit largest Integer t is capped", 429, []string{"RateLimit", `"m";r=3;t=999999999999999`}, in(maxServerPause)},
		{"429 Retry-After HTTP-date far ahead is capped", 429, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}, in(maxServerPause)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
			for i := 0; i < len(tc.fields); i += 2 {
				resp.Header.Add(tc.fields[i], tc.fields[i+1])
			}
			got := serverPause(resp, retryStatus(tc.status), now)
			require.True(t, tc.want.Equal(got), "got %v, want %v", got, tc.want)
		})
	}
}

// TestRateLimitDeepNesting is issue 13's defect 1: a RateLimit field of
// 9.7 million '(', under net/http's default 10 MB limit on a response's
// header, made the reader recurse once per '(' into a fatal stack overflow,
// which no recover catches. The Transport does not read a field that long
// any more (TestRateLimitFieldCap); the reader itself finds it malformed,
// in linear time, and ignores it whole (issue 23), whatever else it holds.
func TestRateLimitDeepNesting(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	deep := strings.Repeat("(", 9_700_000)
	for _, field := range []string{
		deep,
		deep + `"a";r=0;t=5)`,
		deep + `, "h";r=0;t=7`,
		`"h";r=0;t=8, ` + deep,
		strings.Repeat(`("a" `, 2_000_000) + `, "h";r=0;t=9`,
	} {
		exhausted, any := ratefields.ReadRateLimit(field)
		require.Equal(t, [2]int64{-1, -1}, [2]int64{exhausted, any}, "a field of %d bytes", len(field))
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Ratelimit": {field}}}
		require.True(t, serverPause(resp, true, now).IsZero(), "a field of %d bytes is not read", len(field))
	}
}

// TestRateLimitFieldCap: the Transport reads RateLimit field lines of up to
// maxRateLimitField bytes in all, joined by commas as one list; a longer
// field asks for no pause, however it ends.
func TestRateLimitFieldCap(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	member := `"h";r=0;t=9`
	pad := func(n int) string { // a valid member of exactly n bytes, and the member
		return `"` + strings.Repeat("p", n-len(member)-8) + `";r=1, ` + member
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  time.Time
	}{
		{"one line at the cap", []string{pad(maxRateLimitField)}, now.Add(9 * time.Second)},
		{"one line over it", []string{pad(maxRateLimitField + 1)}, time.Time{}},
		{"two lines at the cap with their comma", []string{pad(maxRateLimitField / 2), pad(maxRateLimitField/2 - 1)}, now.Add(9 * time.Second)},
		{"two lines over it", []string{pad(maxRateLimitField / 2), pad(maxRateLimitField / 2)}, time.Time{}},
		{"many short lines over it", slices.Repeat([]string{member}, maxRateLimitField/len(member)+1), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			joined := strings.Join(tc.lines, ",")
			require.Equal(t, strings.HasSuffix(tc.name, "cap") || strings.HasSuffix(tc.name, "comma"), len(joined) <= maxRateLimitField, "%d bytes", len(joined))
			exhausted, _ := ratefields.ReadRateLimit(joined)
			require.EqualValues(t, 9, exhausted, "the field itself is well formed (%d bytes)", len(joined))
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Ratelimit": tc.lines}}
			got := serverPause(resp, true, now)
			require.True(t, tc.want.Equal(got), "%d bytes joined: got %v, want %v", len(joined), got, tc.want)
		})
	}
}

// TestBackoffJitterBounds checks every retry's delay against its bounds with
// the lowest, the highest and a spread of random numbers from a fixed seed:
// between half the nominal delay and all of it, never the same for all.
func TestBackoffJitterBounds(t *testing.T) {
	const base, ceil = 100 * time.Millisecond, time.Second
	nominal := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for _, r := range []float64{0, 0.5, 0.999999999, -3, 7} { // out-of-range values are clamped
		tr := &Transport{Backoff: base, MaxBackoff: ceil, Rand: func() float64 { return r }}
		for i, n := range nominal {
			d := n * time.Millisecond
			got := tr.backoff(i)
			require.GreaterOrEqual(t, got, d/2, "retry %d, rand %v", i, r)
			require.LessOrEqual(t, got, d, "retry %d, rand %v", i, r)
			switch {
			case r <= 0:
				require.Equal(t, d/2, got, "rand 0 gives half the delay")
			case r == 0.5:
				require.Equal(t, d*3/4, got)
			}
		}
	}

	src := rand.New(rand.NewPCG(1, 2))
	tr := &Transport{Backoff: base, MaxBackoff: ceil, Rand: src.Float64}
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := tr.backoff(2)
		require.GreaterOrEqual(t, got, 200*time.Millisecond)
		require.Less(t, got, 400*time.Millisecond)
		seen[got] = true
	}
	require.Greater(t, len(seen), 900, "1000 clients refused together spread over the jitter window")

	var zero Transport
	for i := range 70 { // large retry counts cap, never overflow
		got := zero.backoff(i)
		require.Greater(t, got, time.Duration(0))
		require.LessOrEqual(t, got, defaultMaxBackoff)
	}
	require.GreaterOrEqual(t, zero.backoff(0), defaultBackoff/2)
	require.LessOrEqual(t, zero.backoff(0), defaultBackoff)
}

// TestPausesUpkeep is issue 13's defect 6: the pause map grew without bound
// and, with 64 or more pauses running, every new pause scanned all of them
// (0.11 ms a request at 5,000 paused keys, 0.46 ms at 40,000). Adding
// 50,000 pauses that all outlast the test visits at most 32 entries per
// pause, keeps at most the cap, and drops the earliest-ending first,
// counting each.
func TestPausesUpkeep(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const added, limit = 50_000, 4096
	for _, tc := range []struct {
		name string
		end  func(i int) time.Time
	}{
		{"later and later", func(i int) time.Time { return now.Add(time.Hour + time.Duration(i)*time.Millisecond) }},
		{"earlier and earlier", func(i int) time.Time { return now.Add(time.Hour - time.Duration(i)*time.Millisecond) }},
		{"all at once", func(int) time.Time { return now.Add(time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pauses
			lastDrop := -1 // the pause whose adding last dropped some
			for i := range added {
				dropped := p.dropped
				p.add(strconv.Itoa(i), tc.end(i), now, limit)
				require.LessOrEqual(t, len(p.ends), limit, "pause %d", i)
				if p.dropped != dropped {
					lastDrop = i
				}
			}
			t.Logf("%d entries visited for %d pauses added, %d dropped", p.visited, added, p.dropped)
			require.LessOrEqual(t, p.visited, uint64(32*added), "entries visited")
			require.Equal(t, uint64(added), uint64(len(p.ends))+p.dropped, "every pause kept or counted")
			require.GreaterOrEqual(t, len(p.ends), limit-limit/8)
			// At the last drop, what was kept ends no earlier than anything
			// dropped; pauses added since are kept whatever their end.
			var latestDropped, earliestKept time.Time
			for i := range lastDrop + 1 {
				u := tc.end(i)
				if _, kept := p.ends[strconv.Itoa(i)]; !kept && u.After(latestDropped) {
					latestDropped = u
				} else if kept && (earliestKept.IsZero() || u.Before(earliestKept)) {
					earliestKept = u
				}
			}
			require.Positive(t, lastDrop)
			require.False(t, latestDropped.After(earliestKept), "dropped a pause ending at %v, kept one ending at %v", latestDropped, earliestKept)
		})
	}

	// Pauses that have ended are swept, not dropped: 50,000 pauses of 1 s,
	// one every 100 ms, never fill a cap of 4096.
	var p pauses
	for i := range added {
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		p.add(strconv.Itoa(i), at.Add(time.Second), at, limit)
	}
	require.Zero(t, p.dropped)
	require.LessOrEqual(t, len(p.ends), 2*sweepAbove)
	require.LessOrEqual(t, p.visited, uint64(4*added))

	// A pause renewed for the same key takes no more room, and only grows.
	p = pauses{}
	p.add("k", now.Add(time.Minute), now, 1)
	p.add("k", now.Add(time.Second), now, 1)
	require.Equal(t, now.Add(time.Minute), p.until("k", now))
	p.add("k", now.Add(time.Hour), now, 1)
	require.Equal(t, map[string]time.Time{"k": now.Add(time.Hour)}, p.ends)
	p.add("j", now.Add(time.Minute), now, 1)
	require.Equal(t, map[string]time.Time{"k": now.Add(time.Hour)}, p.ends, "a cap of 1 keeps the pause that ends last")
	require.Equal(t, uint64(1), p.dropped)
	p.add("i", now.Add(2*time.Hour), now, 1)
	require.Equal(t, map[string]time.Time{"i": now.Add(2 * time.Hour)}, p.ends)
	require.Equal(t, uint64(2), p.dropped)
}

// TestNth checks the quickselect against a sort, on times with many equal.
func TestNth(t *testing.T) {
	src := rand.New(rand.NewPCG(3, 4))
	base := time.Unix(0, 0)
	for range 200 {
		n := 1 + src.IntN(300)
		a := make([]time.Time, n)
		for i := range a {
			a[i] = base.Add(time.Duration(src.IntN(1 + n/3)))
		}
		sorted := slices.Clone(a)
		slices.SortFunc(sorted, time.Time.Compare)
		k := src.IntN(n)
		require.Equal(t, sorted[k], nth(a, k), "k=%d of %d", k, n)
	}
}
