package quota_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// ReadRateLimit finds every member's r and t, and skips what does not
// parse: the largest t of the members with r=0, and of all.
func TestReadRateLimit(t *testing.T) {
	for _, tc := range []struct {
		field          string
		exhausted, any int64
	}{
		{``, -1, -1},
		{`"minute";r=0;t=42`, 42, 42},
		{`"minute";r=0;t=42, "hour";r=0;t=600, "day";r=5;t=9000`, 600, 9000},
		{`"minute";r=3;t=7, "hour";r=1;t=9`, -1, 9},
		{`"minute";r=0`, -1, -1},
		{`default;t=8;r=0`, 8, 8},
		{`"a,b;r=9";r=0;t=6`, 6, 6},
		{`"a\"b";r=0;t=4`, 4, 4},
		{`"m";pk=:cHsx:;r=0;x="y;z";t=11`, 11, 11},
		{`"m";r=0;t=oops, "h";r=0;t=12`, 12, 12},
		{`"m";r=0;t=99 junk, "h";r=0;t=13`, 13, 13},
		{`"m;r=0;t=5`, -1, -1},
		{`"m";r=0;t=5.5`, -1, -1},
		{`"m";r=0;t=-5`, -1, -1},
		{`"m";r=-0;t=6`, 6, 6},
		{`("a" "b";q=1);r=0;t=14`, 14, 14},
		{`("a" ("b"));r=0;t=14`, -1, -1},
		{`(("a"));r=0;t=14, "h";r=0;t=3`, 3, 3},
		{`"m";r=(0);t=5`, -1, -1},
		{`"m";r=0;t=999999999999999`, 999999999999999, 999999999999999},
		{`"m";r=0;t=1000000000000000`, -1, -1},
		{strings.Repeat("(", 1<<16) + `, "h";r=0;t=7`, 7, 7},
	} {
		exhausted, any := quota.ReadRateLimit(tc.field)
		require.Equal(t, [2]int64{tc.exhausted, tc.any}, [2]int64{exhausted, any}, "%.60q", tc.field)
	}
}

// ReadRateLimit reads what Decide writes: for two policies' fields, one
// after the other as two field lines are read, it finds the largest t of
// those with r=0, and of both. Whatever follows them, it still counts them,
// and answers within the bounds of an Integer.
func FuzzReadRateLimit(f *testing.F) {
	f.Add(uint32(0), uint32(42), uint32(5), uint32(600), "")
	f.Add(uint32(3), uint32(0), uint32(0), uint32(1), `"h";r=0;t=9`)
	f.Add(uint32(0), uint32(7), uint32(0), uint32(7), strings.Repeat("(", 1<<10))
	f.Add(uint32(1), uint32(2), uint32(3), uint32(4), `"unterminated;r=0;t=5`)
	f.Add(uint32(1), uint32(2), uint32(0), uint32(4), `("a" ("b"));r=0;t=14, x;r=0;t=999999999999999`)
	f.Fuzz(func(t *testing.T, r1, t1, r2, t2 uint32, rest string) {
		field := func(name string, r, secs uint32) string {
			lim := &scripted{result: keylimit.Result{Allowed: true, Limit: int(r), Remaining: int(r), ResetAfter: time.Duration(secs) * time.Second}}
			d, err := quota.New(quota.Config{Policies: []quota.Policy{{Name: name, Limiter: lim}}})
			require.NoError(t, err)
			v, err := d.Decide(context.Background(), "k", "", 0)
			require.NoError(t, err)
			return v.RateLimit()
		}
		written := field("a", r1, t1) + ", " + field("b", r2, t2)
		wantExhausted, wantAny := int64(-1), max(int64(t1), int64(t2))
		for _, m := range [][2]uint32{{r1, t1}, {r2, t2}} {
			if m[0] == 0 {
				wantExhausted = max(wantExhausted, int64(m[1]))
			}
		}
		exhausted, any := quota.ReadRateLimit(written)
		require.Equal(t, [2]int64{wantExhausted, wantAny}, [2]int64{exhausted, any}, "%q", written)

		exhausted, any = quota.ReadRateLimit(written + ", " + rest)
		require.GreaterOrEqual(t, exhausted, wantExhausted, "what follows does not hide the members before it")
		require.GreaterOrEqual(t, any, wantAny)
		require.LessOrEqual(t, exhausted, any)
		require.LessOrEqual(t, any, int64(999_999_999_999_999))
	})
}
