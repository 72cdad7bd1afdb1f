package redislimit

import (
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// FuzzFreshReply feeds the readers of a plain take's reply (take.go:
// "@seconds ns a interval", a fixed window's "@seconds µs", "=count" or
// "!count seconds µs", "@e1 e2 …", a sliding log of the appendable shape), which come
// from the server, any reply: none panics, and a reply read is an
// admission within the limit, or a fixed window's refusal, its times
// within [0, InfDuration).
func FuzzFreshReply(f *testing.F) {
	for _, seed := range []string{
		"@1735689600 123456789 100000000 100000000", "@1735689600 500000 1 1000000", "@1735689600123456",
		"@-5 0 1 1", "@9223372036854775807 999999999 9223372036854775807 1", "@1 2 3", "@1 2 3 4 5", "1 2 3 4",
		"@x 1 1 1", "@1  1 1", "@-9223372036854775808 -1 1 -1", "",
		// sliding logs of the short shape: in order, within a period,
		// ending with n entries of the admission's time
		"@1735689600123456 1735689600523456 1735689600923456", "@1735689600123456 1735689600123456",
		"@1735689600923456 1735689600123456", "@1735689600123456 1735689601123456", "@1 2 3 4 5 6 7 8 9",
		"@-9223372036854775808 9223372036854775807", "@1735689600123456 ", "@ 1735689600123456",
		// a fixed window's: the time of a window's first take, the count
		// after a take in the window expected, a refusal on the count
		// found
		"@1735689600 500000", "@1735689600 0", "@1735689600 999999", "@1735689600 1000000", "@-1 5", "@1735689600", "@1735689600 -1",
		"=3", "=10", "=11", "=0", "=-1", "=9223372036854775807", "= 3", "=3 1735689600999", "=",
		"!10 1735689600 500000", "!9 1735689600 500000", "!0 1735689600 0", "!-1 1735689600 0", "!11 1735689601 0",
		"!10 1735689602 0", "!9223372036854775807 1 1", "!10 1735689600 1000000", "!10 1735689600", "!10", "!", "!x 1 1",
		// sliding logs of the appendable shape under PerSecond(10) and
		// PerSecond(3): a head, the epoch's 10 digits, entries of 16
		// digits, each counting as the greatest so far; entries that left
		// the window may remain
		"@j81000000/10:1735689600 1735689600123456", "@j31000000/3:1735689600 1735689600123456 1735689600523456",
		"@j81000000/10:1735689600 1735689600523456 1735689600123456", "@j81000000/10:1735689600 1735689598123456 1735689600123456",
		"@j81000000/10:1735689600 1735689598123456", "@j81000000/11:1735689600 1735689600123456",
		"@j81000000/10:173568960 1735689600123456", "@j81000000/10:17356896x0 1735689600123456",
		"@j81000000/10:1735689600 173568960012345", "@j81000000/10:1735689600 +735689600123456",
		"@j81000000/10:1735689600 -735689600123456 1735689600123456", "@j81000000/10:1735689600",
		"@j81000000/10:1735689600 1 2 3 4 5 6 7 8 9", "@j31000000/3:1735689600 1735689600123456 1735689600223456 1735689600323456 1735689600423456",
		"@j81000000/10:1735689600 9223372036854775 1735689600123456",
	} {
		f.Add(seed, uint8(1))
	}
	limit := keylimit.PerSecond(10)
	s := &store{}
	kinds := []struct {
		k     *keyLimit
		fresh func(*keyLimit, int, string, int64) (keylimit.Result, int64, bool)
	}{
		{newKeyLimit(s, &bucketAlgorithm, limit), bucketFresh},
		{newKeyLimit(s, &fixedAlgorithm, limit), fixedFresh},
		{newKeyLimit(s, &slidingAlgorithm, limit), slidingFresh},
		{newKeyLimit(s, &slidingAlgorithm, keylimit.PerSecond(3)), slidingFresh},
	}
	f.Fuzz(func(t *testing.T, reply string, n uint8) {
		for _, kind := range kinds {
			r, _, ok := kind.fresh(kind.k, int(n%12), reply, 1735689601_000000) // a window's end, of a second
			if !ok {
				continue
			}
			require.True(t, r.Allowed || kind.k.alg == &fixedAlgorithm && reply[0] == '!', "%+v from %q", r, reply)
			require.True(t, r.RetryAfter >= 0 && r.RetryAfter < keylimit.InfDuration, "a time of %v from %q", r.RetryAfter, reply)
			require.Equal(t, kind.k.quota, r.Limit)
			require.True(t, r.Remaining >= 0 && r.Remaining <= r.Limit, "Remaining %d", r.Remaining)
			for _, d := range []time.Duration{r.ResetAfter, r.RefillAfter} {
				require.True(t, d >= 0 && d < keylimit.InfDuration, "a time of %v from %q", d, reply)
			}
			if kind.k.alg == &slidingAlgorithm {
				// A log's newest time is its newest raw entry's, or after it
				// by less than an epoch: full within two periods, and more
				// quota no later than that.
				require.True(t, r.ResetAfter <= 2*kind.k.limit.Period && r.RefillAfter <= r.ResetAfter, "%+v from %q", r, reply)
			}
		}
	})
}
