package httplimit

import (
	"strconv"
	"testing"
)

// FuzzParseCost holds the cost header's reader to a model: strconv's
// reading of an unsigned decimal, for at most 18 digits and nothing else
// (no sign, no spaces, no underscores); anything else is -1.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"", "0", "7", "007", "123456789012345678", "1234567890123456789", "-1", "+1", " 1", "1 ", "1_0", "0x10", "9223372036854775807", "3x", "١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := -1
		digits := len(s) > 0 && len(s) <= maxCostDigits
		for i := 0; i < len(s); i++ {
			digits = digits && s[i] >= '0' && s[i] <= '9'
		}
		if digits {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("%q: the model: %v", s, err)
			}
			want = int(n)
		}
		if got := parseCost(s); got != want {
			t.Fatalf("parseCost(%q) = %d, want %d", s, got, want)
		}
	})
}
