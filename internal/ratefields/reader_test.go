package ratefields_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

// ReadRateLimit finds every String member's r and t: the largest t of the
// members with r=0, and of all. A field that is not a valid RFC 9651 List
// says nothing, whatever part of it is valid; a member that is not a
// String names no policy, and a t or r that is not a non-negative Integer
// counts as absent.
func TestReadRateLimit(t *testing.T) {
	for _, tc := range []struct {
		field          string
		exhausted, any int64
	}{
		{``, -1, -1},
		{`   `, -1, -1},
		{`"minute";r=0;t=42`, 42, 42},
		{`  "minute";r=0;t=42  `, 42, 42},
		{`"minute";r=0;t=42, "hour";r=0;t=600, "day";r=5;t=9000`, 600, 9000},
		{`"minute";r=0;t=42,"hour";r=0;t=600,` + "\t" + `"day";r=5;t=9000`, 600, 9000},
		{`"minute";r=3;t=7, "hour";r=1;t=9`, -1, 9},
		{`"minute";r=0`, -1, -1},
		{`"a,b;r=9";r=0;t=6`, 6, 6},
		{`"a\"b";r=0;t=4`, 4, 4},
		{`"m";pk=:cHsx:;r=0;x="y;z";t=11`, 11, 11},
		{`"m";r=0;t=5;t=6`, 6, 6},                // the last of a repeated key
		{`"m";r=0;t=oops, "h";r=0;t=12`, 12, 12}, // t a Token: absent
		{`"m";r=0;t=5.5, "h";r=0;t=3`, 3, 3},     // t a Decimal: absent
		{`"m";r=0;t=-5`, -1, -1},                 // negative: absent
		{`"m";r=-0;t=6`, 6, 6},                   // -0 is 0
		{`"m";r=0;t`, -1, -1},                    // t the Boolean true: absent
		{`"m";r=0;t=999999999999999`, 999999999999999, 999999999999999},
		{`"m";r=0;t=2;d=@1700000000;e=%"caf%c3%a9";f=?1`, 2, 2},
		{`"m";r=0;t=2;pk=:AA==:, ("a" "b";q=1);r=0;t=14`, 2, 2}, // an Inner List names no policy
		// Members that are not Strings name no policy.
		{`default;t=8;r=0`, -1, -1},
		{`p;r=0;t=2, "q";r=0;t=1`, 1, 1},
		{`("p");r=0;t=2`, -1, -1},
		{`7;r=0;t=2`, -1, -1},
		{`:cHsx:;r=0;t=2`, -1, -1},
		// Malformed: the whole field is ignored, the valid members too.
		{`"p";r=0;t=2,`, -1, -1},
		{`,"p";r=0;t=2`, -1, -1},
		{`"p";r=0;t=2,,"q";r=0;t=3`, -1, -1},
		{"\t" + `"p";r=0;t=2`, -1, -1},
		{`"é";r=0;t=2`, -1, -1},
		{`"p";pk=:A=:;r=0;t=2`, -1, -1},
		{`"p";pk=:AAA:;r=0;t=2`, -1, -1},
		{`"p";r=0;t=2 junk, "h";r=0;t=13`, -1, -1},
		{`"m;r=0;t=5`, -1, -1},
		{`"m" ;r=0;t=5`, -1, -1},
		{`"m";R=0;t=5`, -1, -1},
		{`"m";r=0;t=1000000000000000`, -1, -1},
		{`"m";r=0;t=1.5555`, -1, -1},
		{`"m";r=0;t=5.`, -1, -1},
		{`"m";r=(0);t=5`, -1, -1},
		{`"m";r=0;t=5;x=?2`, -1, -1},
		{`"m";r=0;t=5;x=@1.5`, -1, -1},
		{`"m";r=0;t=5;x=%"%C3%A9"`, -1, -1}, // uppercase hex
		{`"m";r=0;t=5;x=%"%c3"`, -1, -1},    // a rune cut short
		{`"m";r=0;t=5;x=%"%ff"`, -1, -1},    // not UTF-8
		{`"bad\escape";r=0;t=5`, -1, -1},
		{`("a" ("b"));r=0;t=14`, -1, -1},
		{`(("a"));r=0;t=14, "h";r=0;t=3`, -1, -1},
		{`("a""b");r=0;t=14, "h";r=0;t=3`, -1, -1},
		{strings.Repeat("(", 1<<16) + `, "h";r=0;t=7`, -1, -1},
		{`"h";r=0;t=7, ` + strings.Repeat("(", 1<<16), -1, -1},
	} {
		exhausted, any := ratefields.ReadRateLimit(tc.field)
		require.Equal(t, [2]int64{tc.exhausted, tc.any}, [2]int64{exhausted, any}, "%.60q", tc.field)
	}
}

// ReadRateLimit allocates nothing, however long or deep the field.
func TestReadRateLimitAllocs(t *testing.T) {
	for _, field := range []string{
		`"minute";r=0;t=42, "hour";r=90;t=600;pk=:cHsx:;d=%"caf%c3%a9"`,
		strings.Repeat(`("a" `, 1<<10),
	} {
		require.Zero(t, testing.AllocsPerRun(100, func() { ratefields.ReadRateLimit(field) }), "%.40q", field)
	}
}

// ReadRateLimit reads what Decide writes: for two policies' fields, one
// after the other as two field lines are read, it finds the largest t of
// those with r=0, and of both. Whatever follows them, it reads either the
// members before as they are, or (the field being malformed) nothing, and
// answers within the bounds of an Integer. (The conformance module holds
// the reader to an independent RFC 9651 parser on any field.)
func FuzzReadRateLimit(f *testing.F) {
	f.Add(uint32(0), uint32(42), uint32(5), uint32(600), "")
	f.Add(uint32(3), uint32(0), uint32(0), uint32(1), `"h";r=0;t=9`)
	f.Add(uint32(0), uint32(7), uint32(0), uint32(7), strings.Repeat("(", 1<<10))
	f.Add(uint32(1), uint32(2), uint32(3), uint32(4), `"unterminated;r=0;t=5`)
	f.Add(uint32(1), uint32(2), uint32(0), uint32(4), `("a" ("b"));r=0;t=14, x;r=0;t=999999999999999`)
	f.Fuzz(func(t *testing.T, r1, t1, r2, t2 uint32, rest string) {
		field := func(name string, r, secs uint32) string {
			lim := &scripted{result: keylimit.Result{Allowed: true, Limit: int(r), Remaining: int(r), RefillAfter: time.Duration(secs) * time.Second}}
			// A window as long as any t, which is at most w.
			d, err := quota.New(quota.Config{Policies: []quota.Policy{{Name: name, Limiter: lim, Window: math.MaxUint32 * time.Second}}})
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
		exhausted, any := ratefields.ReadRateLimit(written)
		require.Equal(t, [2]int64{wantExhausted, wantAny}, [2]int64{exhausted, any}, "%q", written)

		exhausted, any = ratefields.ReadRateLimit(written + ", " + rest)
		if exhausted != -1 || any != -1 {
			require.GreaterOrEqual(t, exhausted, wantExhausted, "a valid field counts every member")
			require.GreaterOrEqual(t, any, wantAny)
		}
		require.LessOrEqual(t, exhausted, any)
		require.LessOrEqual(t, any, int64(999_999_999_999_999))
	})
}

// scripted is a limiter whose every decision is result.
type scripted struct{ result keylimit.Result }

func (l *scripted) Take(string, int) keylimit.Result { return l.result }
func (l *scripted) Peek(string) keylimit.Result      { return l.result }
func (l *scripted) Allow(k string) bool              { return l.result.Allowed }
func (l *scripted) AllowN(k string, n int) bool      { return l.result.Allowed }
func (l *scripted) Reset(string)                     {}
