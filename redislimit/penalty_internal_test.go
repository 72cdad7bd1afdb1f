package redislimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzPenaltyMessages: what a penalty reads from Redis, an announcement on
// a channel anyone may publish on and the script's reply, is taken only in
// its own form and otherwise ignored, never a panic, never a ban longer
// than 2^60 ns or a negative one.
func FuzzPenaltyMessages(f *testing.F) {
	f.Add("3600000000 5 abc k")
	f.Add("1 0 x a key with spaces")
	f.Add("-5 1 x k")
	f.Add("99999999999999999999 1 x k")
	f.Add("1 0 1")
	f.Add("0 0 0")
	f.Add("1 3600000000 1")
	f.Fuzz(func(t *testing.T, s string) {
		if left, limit, origin, key, ok := parseBan(s); ok {
			require.Positive(t, left)
			require.LessOrEqual(t, left, time.Duration(maxSpan))
			require.GreaterOrEqual(t, limit, 0)
			require.NotContains(t, origin, " ")
			if left < time.Duration(maxSpan) {
				again, l2, o2, k2, ok := parseBan(fmt.Sprintf("%d %d %s %s", left/time.Microsecond, limit, origin, key))
				require.True(t, ok)
				require.Equal(t, []any{left, limit, origin, key}, []any{again, l2, o2, k2})
			}
		}
		if left, started, ok := parseRefusal(s); ok {
			require.GreaterOrEqual(t, left, time.Duration(0))
			require.LessOrEqual(t, left, time.Duration(maxSpan))
			require.False(t, started && s[0] == '0', "a ban started by a refusal that is no ban")
		}
	})
}
