package conformance_test

import (
	"strings"
	"testing"

	"github.com/keylimit/keylimit/conformance"
	"github.com/keylimit/keylimit/internal/ratefields"
	"github.com/stretchr/testify/require"
)

// FuzzReaderAgainstHTTPSFV holds ratefields.ReadRateLimit, the reader the
// Transport decides its pauses by, to an independent RFC 9651 parser, on
// any field of one or two lines: where httpsfv rejects the field, the
// reader reads nothing (-1, -1: no pause); where it accepts it, the reader
// reads the same largest t, of the String members with r=0 and of all.
// The Transport joins a field's lines with a comma, httpsfv with ", ": the
// same List.
func FuzzReaderAgainstHTTPSFV(f *testing.F) {
	for _, seed := range [][2]string{
		{`"minute";r=0;t=42, "hour";r=5;t=600`, ``},
		{`"minute";r=4;t=5`, `"hour";r=0;t=70`},
		{`"p";r=0;t=2,`, ``},
		{`,"p";r=0;t=2`, ``},
		{`"é";r=0;t=2`, ``},
		{`"p";r=0;t=2;pk=:A=:`, ``},
		{`"p";r=0;t=2;pk=:cHsdsRa894==:`, ``},
		{`p;r=0;t=2`, ``},
		{`("p");r=0;t=2`, ``},
		{`("a" "b";q=1);r=0;t=14, "h";r=0;t=4`, ``},
		{`"m";r=-0;t=6;t=7;x=?1;d=@-5;e=%"caf%c3%a9";f=1.5;g=tok/x:y`, ``},
		{`"m";r=0;t=1000000000000000`, ``},
		{`"m";r=0;t=999999999999.5`, `"n";r=0;t=1234567890123.5`},
		{"\t" + `"p";r=0;t=2`, ``},
		{`"p";r=0;t=2` + "\t", `  "q";r=0;t=3  `},
		{`"p";r=0;t=2`, ``},
		{``, `"p";r=0;t=2`},
		{`"m";r=0;t=5;x=%"%c3"`, `"m";r=0;t=5;x=%"%ff"`},
		{`"a\"b\\c";r=0;t=4`, `"bad\escape";r=0;t=5`},
		{strings.Repeat("(", 1<<10), `"h";r=0;t=7`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		lines := []string{line1}
		if line2 != "" {
			lines = append(lines, line2)
		}
		exhausted, any := ratefields.ReadRateLimit(strings.Join(lines, ","))
		wantExhausted, wantAny, valid := conformance.Read(lines)
		if !valid {
			require.Equal(t, [2]int64{-1, -1}, [2]int64{exhausted, any}, "%q: httpsfv rejects it, and the reader read it", lines)
			return
		}
		require.Equal(t, [2]int64{wantExhausted, wantAny}, [2]int64{exhausted, any}, "%q: the reader reads other r or t than httpsfv", lines)
	})
}
