package redislimit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// FuzzParseReply feeds parseReply any reply, as a server (or something
// posing as one) might send: it never panics, reads a reply only if it is
// exactly five integers per limiter, keeps Remaining within [0, quota] and
// every time within [0, InfDuration), and reads back what it read when it
// is formatted again.
func FuzzParseReply(f *testing.F) {
	for _, seed := range []string{
		"1 9 0 6000 1735689600000000000", "0 0 15000000 60000000 0 1 3 0 0 0", "1 2 3 4", "1 2 3 4 5 6",
		"-1 -5 -9000000000000000000 9000000000000000000 0", "1  2 3 4 5", "1 2 3 4 5 ", "x",
		"1 99999999999999999999 0 0 0",
	} {
		f.Add(seed, uint8(1))
	}
	bucket := &algorithm{name: "bucket", unit: time.Nanosecond}
	fixed := &algorithm{name: "fixed", unit: time.Microsecond}
	f.Fuzz(func(t *testing.T, reply string, count uint8) {
		parts := make([]*keyLimit, 1+count%4)
		for i := range parts {
			parts[i] = &keyLimit{alg: bucket, quota: 10}
			if i%2 == 1 {
				parts[i] = &keyLimit{alg: fixed, quota: 7}
			}
		}
		res := make([]keylimit.Result, len(parts))
		marks := make([]int64, len(parts))
		if !parseReply(reply, parts, res, marks) {
			return
		}
		require.Len(t, strings.Fields(reply), 5*len(parts), "a reply read for %d limiters", len(parts))
		var again []string
		for i, r := range res {
			require.True(t, r.Remaining >= 0 && r.Remaining <= parts[i].quota, "Remaining %d", r.Remaining)
			require.True(t, r.RetryAfter >= 0 && r.RetryAfter < keylimit.InfDuration, "RetryAfter %v", r.RetryAfter)
			require.True(t, r.ResetAfter >= 0 && r.ResetAfter < keylimit.InfDuration, "ResetAfter %v", r.ResetAfter)
			require.Equal(t, parts[i].quota, r.Limit)
			allowed := 0
			if r.Allowed {
				allowed = 1
			}
			again = append(again, fmt.Sprintf("%d %d %d %d %d", allowed, r.Remaining,
				r.RetryAfter/parts[i].alg.unit, r.ResetAfter/parts[i].alg.unit, marks[i]))
		}
		res2 := make([]keylimit.Result, len(parts))
		marks2 := make([]int64, len(parts))
		require.True(t, parseReply(strings.Join(again, " "), parts, res2, marks2), "the reply formatted again")
		require.Equal(t, marks, marks2)
		for i := range res {
			require.Equal(t, res[i].Allowed, res2[i].Allowed)
			require.Equal(t, res[i].Remaining, res2[i].Remaining)
		}
	})
}
