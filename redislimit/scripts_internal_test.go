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

// FuzzParseLeaseReply feeds parseLeaseReply any reply to a lease of up to
// want events, for an instance of lease time period: it never panics, and
// reads a reply only if it is eight integers whose sixth, the events
// leased, is within [0, want], whose seventh, the pace, is within [0,
// maxPace × period], and whose eighth, the lease's time, within [0, the
// limit's span]; a refusal leases nothing.
func FuzzParseLeaseReply(f *testing.F) {
	for _, seed := range []string{
		"1 9000 0 120000000 1735689600120000000 99 0 0", "1 9000 0 0 1735689600120000000 0 0 0", "0 0 100000 100000 0 0 0 0",
		"1 9000 0 120000000 1735689600120000000 3 40000000 9000", "0 0 100000 100000 0 0 5 0", "0 0 100000 100000 0 2 0 0",
		"1 2 3 4 5 6 7", "1 2 3 4 5 -1 0 0", "1 2 3 4 5 6 -1 0", "1 2 3 4 5 6 0 -1", "1 2 3 4 5 101 0 0", "1 2 3 4 5 1 9223372036854775807 0",
		"1 2 3 4 5 9223372036854775807 0 0", "1 2 3 4 5 1 0 9223372036854775807", "1 2 3 4 5 6 7 8 9", " ", "", "1 2 3 4 5 6 99999999999 0",
	} {
		f.Add(seed, uint16(100), int64(20_000_000))
	}
	parts := []*keyLimit{{alg: &algorithm{name: "bucket", unit: time.Nanosecond}, quota: 1000, step: 1_000_000, span: 1_000_000_000}}
	f.Fuzz(func(t *testing.T, reply string, want uint16, period int64) {
		res := make([]keylimit.Result, 1)
		marks := make([]int64, 1)
		leased, pace, life, ok := parseLeaseReply(reply, parts, res, marks, int(want), period)
		if !ok {
			return
		}
		require.Len(t, strings.Fields(reply), 8, "a lease reply read")
		require.True(t, leased >= 0 && leased <= int64(want), "leased %d of at most %d", leased, want)
		require.True(t, pace >= 0 && pace <= paceLimit(period) && (period > 0 || pace == 0), "pace %d for a lease time of %d", pace, period)
		require.True(t, life >= 0 && life <= parts[0].span, "a lease time of %d", life)
		require.True(t, res[0].Allowed || leased == 0, "a refusal leased %d", leased)
		require.True(t, res[0].Remaining >= 0 && res[0].Remaining <= 1000, "Remaining %d", res[0].Remaining)
	})
}

// clusterTag is the part of a Redis key that Redis Cluster hashes to choose
// its slot, by the cluster specification's rule: what lies between the
// first '{' and the first '}' after it, if that is not empty; else the
// whole key.
func clusterTag(name string) string {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		return name
	}
	end := strings.IndexByte(name[open+1:], '}')
	if end <= 0 {
		return name
	}
	return name[open+1 : open+1+end]
}

// FuzzRedisKey pins issue 24.1: whatever two keys are, the states of each
// under two limiters share a non-empty hash tag (the slot of a joined
// call), a key that the tag can hold is the tag (state written before stays
// found), one that it cannot is tagged by a hash of all of it (no key
// chooses the tag of another), and two keys never share a state.
func FuzzRedisKey(f *testing.F) {
	for _, seed := range [][2]string{{"}x", "x"}, {"}", ""}, {"}}{{", "{"}, {"a}b", "a"}, {"0123456789abcdef", ""},
		{"k", "k}"}, {"\x00", "{}"}} {
		f.Add(seed[0], seed[1])
	}
	a := &store{prefix: "keylimit:api:bucket:10/1m0s/10:"}
	b := &store{prefix: "x:"}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		for _, k := range []string{k1, k2} {
			tag := clusterTag(a.redisKey(k))
			require.NotEqual(t, a.redisKey(k), tag, "key %q: no hash tag", k)
			require.Equal(t, tag, clusterTag(b.redisKey(k)), "key %q: the tags of two limiters' states", k)
			if k != "" && !strings.Contains(k, "}") {
				require.Equal(t, k, tag, "key %q: the tag", k)
				require.Equal(t, a.prefix+"{"+k+"}", a.redisKey(k), "key %q: the state's name", k)
			} else {
				require.Equal(t, fmt.Sprintf("%016x", tagHash(k)), tag, "key %q: the tag", k)
			}
		}
		if k1 != k2 {
			require.NotEqual(t, a.redisKey(k1), a.redisKey(k2), "keys %q and %q share a state", k1, k2)
		}
	})
}
