package redislimit_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/stretchr/testify/require"
)

// TestFixedWindowsAlignToTheEpoch: a fixed window ends at a multiple of its
// period since the Unix epoch, as the in-memory FixedWindow's do, whatever
// the time of the first request: decision time + ResetAfter is a multiple
// of the period.
func TestFixedWindowsAlignToTheEpoch(t *testing.T) {
	t.Parallel() // on real time, with keys of its own
	const period = 700 * time.Millisecond
	lim, err := redislimit.NewFixedWindow(shared.client(t), "test", keylimit.Per(5, period), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	for i := range 3 {
		time.Sleep(time.Duration(rand.Int64N(int64(period))))
		var r keylimit.Result
		at := timed(func() { r = lim.Take(testKey(t, "k"), 1) })
		lo := time.Duration(at.start.UnixNano()) + r.ResetAfter - time.Millisecond
		hi := time.Duration(at.end.UnixNano()) + r.ResetAfter + time.Millisecond
		end := hi / period * period
		require.False(t, end < lo || r.ResetAfter <= 0 || r.ResetAfter > period,
			"request %d: ResetAfter %v: the decision's time plus it is no multiple of %v", i, r.ResetAfter, period)
	}
}

// TestBoundary is the boundary comparison of fixed and sliding windows, on
// Redis: 5 per 2 s; 5 requests just before a window boundary, 5 more just
// after it. The fixed window admits all 10 (its known weakness); the
// sliding window refuses the second 5 until the first have left, a period
// after them.
func TestBoundary(t *testing.T) {
	t.Parallel() // on real time, with keys of its own
	const period = 2 * time.Second
	l := keylimit.Per(5, period)
	c := shared.client(t)
	fixed, err := redislimit.NewFixedWindow(c, "test", l, redislimit.WithTimeout(patient))
	require.NoError(t, err)
	sliding, err := redislimit.NewSlidingWindow(c, "test", l, redislimit.WithTimeout(patient))
	require.NoError(t, err)
	fk, sk := testKey(t, "fixed"), testKey(t, "sliding")
	untilBoundary(period, 200*time.Millisecond)
	var r keylimit.Result
	first := timed(func() {
		r = fixed.Take(fk, 5)
		require.True(t, sliding.AllowN(sk, 5), "sliding window: the first 5 requests were refused")
	})
	require.True(t, r.Allowed, "fixed window: the first 5 requests: %+v", r)
	time.Sleep(r.ResetAfter + 50*time.Millisecond) // past the boundary, by Redis's word
	require.True(t, fixed.AllowN(fk, 5), "fixed window: the 5 requests after the boundary were refused")
	var s keylimit.Result
	second := timed(func() { s = sliding.Take(sk, 1) })
	lo, hi := first.start.Add(period).Sub(second.end), first.end.Add(period).Sub(second.start)
	require.False(t, s.Allowed || !within(s.RetryAfter, lo, hi),
		"sliding window after the boundary: %+v, want refused until the first 5 leave, in [%v, %v]", s, lo, hi)
}

// TestSlidingRetryAfterIsWhenTheOldestLeaves: with one entry at t0 and two
// at t1 in a 3-per-300ms log, RetryAfter is when the t0 entry leaves and
// ResetAfter when the t1 ones do; Take(2) waits for a t1 entry. After
// waiting RetryAfter, exactly one request passes, and the next waits for
// the t1 entries. (Without the deny cache, which answers Take(2) after a
// refused Take(1) with Take(1)'s RetryAfter, a lower bound.)
func TestSlidingRetryAfterIsWhenTheOldestLeaves(t *testing.T) {
	const period = 300 * time.Millisecond
	lim, err := redislimit.NewSlidingWindow(shared.client(t), "test", keylimit.Per(3, period),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	require.NoError(t, err)
	key := testKey(t, "k")
	t0 := timed(func() { lim.Allow(key) })
	time.Sleep(100 * time.Millisecond)
	t1 := timed(func() { lim.AllowN(key, 2) })
	// leaves is when an entry made during e leaves, from a call made during c.
	leaves := func(e, c span) (lo, hi time.Duration) {
		return e.start.Add(period).Sub(c.end), e.end.Add(period).Sub(c.start)
	}
	var r, r2 keylimit.Result
	at := timed(func() { r = lim.Take(key, 1) })
	lo, hi := leaves(t0, at)
	require.False(t, r.Allowed || !within(r.RetryAfter, lo, hi),
		"full log: %+v, want refused with RetryAfter in [%v, %v], when the oldest leaves", r, lo, hi)
	lo, hi = leaves(t1, at)
	require.True(t, within(r.ResetAfter, lo, hi), "full log: %+v, want ResetAfter in [%v, %v], when the newest leave", r, lo, hi)
	at = timed(func() { r2 = lim.Take(key, 2) })
	lo, hi = leaves(t1, at)
	require.False(t, r2.Allowed || !within(r2.RetryAfter, lo, hi),
		"Take(2) on the full log: %+v, want refused with RetryAfter in [%v, %v], when a second entry leaves", r2, lo, hi)
	time.Sleep(r.RetryAfter)
	require.True(t, lim.Allow(key), "refused after waiting RetryAfter %v", r.RetryAfter)
	at = timed(func() { r = lim.Take(key, 1) })
	lo, hi = leaves(t1, at)
	require.False(t, r.Allowed || !within(r.RetryAfter, lo, hi),
		"after the oldest left and one more came in: %+v, want refused until the t1 entries leave, in [%v, %v]", r, lo, hi)
}

// TestSlidingNeverExceedsInAnyInterval drives a sliding log from many
// goroutines at random moments and checks every admission: no 6 of them
// fall within one period (5 per 120 ms). Admission times are known to lie
// between the call and its return, so a group that certainly fits in one
// period (last return - first call < period) is a violation. The times
// are the wall clock's, as Redis's TIME is (gettimeofday; Redis runs on
// this machine): on the monotonic clock, a step or slew of the wall clock
// between two admissions (a VM's clock being synced) shows as a gap of
// another length than the script saw (119.44 ms for its 120 was seen in
// CI). slack covers TIME's microseconds and a step within one call.
func TestSlidingNeverExceedsInAnyInterval(t *testing.T) {
	t.Parallel() // on real time, with keys of its own
	const events, period = 5, 120 * time.Millisecond
	const slack = time.Millisecond
	wall := func() time.Time { return time.Now().Round(0) } // no monotonic reading: Sub is the wall clock's
	lim, err := redislimit.NewSlidingWindow(shared.client(t), "test", keylimit.Per(events, period),
		redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(0))
	require.NoError(t, err)
	key := testKey(t, "k")
	var (
		mu       sync.Mutex
		admitted []span
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(time.Second)
	for range 6 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Millisecond))))
				start := wall()
				if lim.Allow(key) {
					end := wall()
					mu.Lock()
					admitted = append(admitted, span{start, end})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].start.Before(admitted[j].start) })
	require.False(t, len(admitted) < 2*events, "only %d admissions in a second of 5 per %v: the limiter refuses too much", len(admitted), period)
	for i := range len(admitted) - events {
		first, last := admitted[i], admitted[i+events]
		require.GreaterOrEqual(t, last.end.Sub(first.start), period-slack,
			"admissions %d to %d (%d of them) all happened within less than the period", i, i+events, events+1)
	}
}

// TestSlidingRefundTakesItsEntries: a sliding log forgets the refunded
// admission's own entries, so the oldest still decides when the key frees
// up.
func TestSlidingRefundTakesItsEntries(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewSlidingWindow(c, "test", keylimit.Per(3, time.Hour), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	key := testKey(t, "k")
	lim.Allow(key)
	first := lim.Peek(key).ResetAfter // the first entry leaves then
	time.Sleep(20 * time.Millisecond)
	lim.Allow(key)
	_, second := lim.Admit(key, 1)
	lim.Refund(key, second)
	lim.Allow(key)
	r := lim.Take(key, 1)
	require.False(t, r.Allowed || r.RetryAfter > first || r.RetryAfter < first-time.Second, "full log whose oldest entry leaves in about %v: %+v; want refused, RetryAfter the oldest entry's", first, r)
}

// TestSlidingLargeN: a sliding log admits a request of thousands of events
// in one call (the script pushes them in chunks that Lua's stack can take).
func TestSlidingLargeN(t *testing.T) {
	c := shared.client(t)
	lim, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerHour(2500), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	key := testKey(t, "k")
	r := lim.Take(key, 2499)
	require.True(t, r.Allowed && r.Remaining == 1, "Take(2499) on a quota of 2500: %v", r)
	n, err := c.LLen(context.Background(), stateKey(lim, key)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2499, n, "entries in the log")
	require.False(t, lim.AllowN(key, 2) || !lim.Allow(key) || lim.Allow(key), "after 2499 of 2500: want AllowN(2) refused, Allow admitted, then refused")
}

// TestSlidingLogShapes: a sliding log of up to 8 entries is a string, which
// an older version, reading a list, fails on (WRONGTYPE) rather than
// misread; a take that makes it longer turns it into a list of every
// entry, which stays one; a refund on the string removes its admission's
// entry; Remaining is exact throughout.
func TestSlidingLogShapes(t *testing.T) {
	c := shared.client(t)
	ctx := context.Background()
	lim, err := redislimit.NewSlidingWindow(c, "test", keylimit.PerHour(20), redislimit.WithTimeout(patient))
	require.NoError(t, err)
	key := testKey(t, "k")
	state := stateKey(lim, key)
	var marks []keylimit.Admission
	for i := 1; i <= 8; i++ {
		r, a := lim.Admit(key, 1)
		require.True(t, r.Allowed && r.Remaining == 20-i, "take %d: %+v", i, r)
		marks = append(marks, a)
		require.Equal(t, "string", c.Type(ctx, state).Val(), "the log of %d entries", i)
		require.Equal(t, i, logEntries(c.Get(ctx, state).Val()), "the log of %d entries: %q", i, c.Get(ctx, state).Val())
	}
	require.ErrorContains(t, c.LLen(ctx, state).Err(), "WRONGTYPE", "an older version's read of the string")
	require.ErrorContains(t, c.LRange(ctx, state, -8, -1).Err(), "WRONGTYPE", "an older version's read of the string")

	lim.Refund(key, marks[7])
	require.Equal(t, 13, lim.Peek(key).Remaining, "after a refund of one of 8")
	require.Equal(t, 7, logEntries(c.Get(ctx, state).Val()), "the log after the refund: %q", c.Get(ctx, state).Val())
	pttl := c.PTTL(ctx, state).Val()
	require.True(t, pttl > 59*time.Minute && pttl <= time.Hour, "the log's expiry after the refund: %v", pttl)

	r := lim.Take(key, 2)
	require.True(t, r.Allowed && r.Remaining == 11, "a take of 2 on 7 entries: %+v", r)
	require.Equal(t, "list", c.Type(ctx, state).Val(), "the log of 9 entries")
	require.EqualValues(t, 9, c.LLen(ctx, state).Val(), "the log of 9 entries")
	pttl = c.PTTL(ctx, state).Val()
	require.True(t, pttl > 59*time.Minute && pttl <= time.Hour, "the list's expiry: %v", pttl)
	for i := 10; i <= 20; i++ {
		r := lim.Take(key, 1)
		require.True(t, r.Allowed && r.Remaining == 20-i, "take %d: %+v", i, r)
	}
	require.False(t, lim.Allow(key), "the 21st take within the hour")
	require.EqualValues(t, 20, c.LLen(ctx, state).Val(), "the log of 20 entries")
}

// logEntries counts the entries of a sliding log of either string shape:
// '@e1 e2 …', or the appendable one, a head and an epoch before them.
func logEntries(log string) int {
	f := strings.Fields(log)
	if len(f) > 0 && len(f[0]) > 1 && f[0][1] >= 'a' {
		return len(f) - 1
	}
	return len(f)
}
