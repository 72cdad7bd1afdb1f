package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestPlainTakeDecidesAsTheFullScript: for each algorithm with a plain
// script, on states of every shape (none, one of this limit, one of this
// limit with a lease time, one of another limit, ahead of now and behind
// it) and requests that fit and that do not, the plain script replies what
// the full script's take replies and leaves the state the full script
// leaves, with the same expiry; or it replies "full" and writes nothing. On
// a redis-server, with the time passed as the tests pass it; half the
// cases in a batch (lua/take_batch.lua), after another take in the same
// call. (A window's
// state is written with the expiry its writer gives it, the end of its
// window: the plain script keeps it, where the full script sets it again.)
func TestPlainTakeDecidesAsTheFullScript(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(26, 1))
	for _, alg := range []*algorithm{&bucketAlgorithm, &fixedAlgorithm, &slidingAlgorithm} {
		t.Run(alg.name, func(t *testing.T) {
			const cases = 600
			decided, full := 0, 0
			shapes := map[string]int{} // of the logs the plain take of a sliding log admitted on
			loggedBefore := make([]string, cases)
			for i := range cases {
				now := [2]int64{1_764_650_000 + r.Int64N(1000), r.Int64N(1e9)}
				n, p1, p2, write := plainCase(r, alg, now)
				k := caseLimit(alg, p1, p2)
				// The Result of a take that finds a count counts from the
				// server's time as the limiter knows it: the test's.
				mock := clock.NewMock()
				mock.Set(time.Unix(now[0], now[1]))
				k.owner = &store{clock: &scriptClock{c: mock}}
				fullKey, plainKey := fmt.Sprintf("full:%d", i), fmt.Sprintf("plain:%d", i)
				began := time.Now() // the expiries are on Redis's real time: see below
				write(ctx, c, fullKey)
				write(ctx, c, plainKey)
				loggedBefore[i] = dumpState(ctx, t, c, plainKey)
				want, err := script.Run(ctx, c, []string{fullKey}, "take", n, alg.name, p1, p2, 0, now[0], now[1]).Text()
				require.NoError(t, err, "case %d: the full script", i)
				got, end, err := plainRun(ctx, c, k, plainKey, int(n), now, i%2 == 1)
				took := time.Since(began)
				if alg == &fixedAlgorithm && (wrongType(err) || notCount(err)) {
					// A state of another shape than the count: the limiter hands
					// the take to the full script, as for "full".
					got, err = needsFull, nil
				}
				require.NoError(t, err, "case %d: the plain script", i)
				before := dumpState(ctx, t, c, plainKey)
				if got == needsFull {
					full++
					write(ctx, c, "again")
					require.Equal(t, dumpState(ctx, t, c, "again"), before, "case %d: a state handed to the full script is written", i)
					continue
				}
				decided++
				if alg == &fixedAlgorithm && got[0] == '=' {
					shapes["count replied"]++
				}
				if alg == &slidingAlgorithm && got[0] != '0' {
					shapes[c.Type(ctx, plainKey).Val()]++
					if got[0] == '@' {
						shapes["log replied"]++
					}
				}
				wantRes, wantMark := parseCase(t, k, int(n), want, 0)
				gotRes, gotMark := parseCase(t, k, int(n), got, end)
				require.Equal(t, wantRes, gotRes, "case %d: take %d under (%d, %d) at %v: the Results of %q and %q", i, n, p1, p2, now, want, got)
				require.Equal(t, wantMark, gotMark, "case %d: take %d under (%d, %d) at %v: the marks of %q and %q", i, n, p1, p2, now, want, got)
				wrote := dumpState(ctx, t, c, fullKey)
				if alg == &slidingAlgorithm {
					// The plain take may leave the appendable shape, with entries
					// that left the window, where the full script writes '@e1 e2 …':
					// the same entries in the window, in the same type of key.
					require.Equal(t, c.Type(ctx, fullKey).Val(), c.Type(ctx, plainKey).Val(), "case %d: the types of the states", i)
					require.Equal(t, slidingMeaning(t, wrote, p1), slidingMeaning(t, before, p1), "case %d: the logs left, %q and %q", i, wrote, before)
					if len(before) > 1 && before[1] >= 'a' && got[0] != '0' {
						shapes["appendable"]++
						if strings.Count(before, " ") == strings.Count(loggedBefore[i], " ")+1 && strings.HasPrefix(before, loggedBefore[i]) {
							shapes["appended"]++
						}
						// A log of an earlier epoch under this head, written anew
						// in now's: its head, another epoch, its entries' tail.
						if head, epochs := slidingHead(k), strings.Index(before, " "); epochs > 0 && strings.HasPrefix(loggedBefore[i], head) &&
							strings.Index(loggedBefore[i], " ") == epochs && loggedBefore[i][:epochs] < before[:epochs] {
							shapes["new epoch"]++
						}
					}
				} else if alg == &fixedAlgorithm {
					meaning := func(state string) string {
						if strings.Contains(state, " x=") {
							return countMeaning(t, state, p1)
						}
						return stateMeaning(t, alg, state)
					}
					require.Equal(t, meaning(wrote), meaning(before), "case %d: the states left", i)
				} else {
					require.Equal(t, stateMeaning(t, alg, wrote), stateMeaning(t, alg, before), "case %d: the states left", i)
				}
				// Each expiry is a time on Redis's real clock (ms since the
				// epoch): that of the write or the script that set it, all of
				// which ran within took, plus a TTL the test's time decides. Two
				// equal TTLs so end no further apart than took (and a ms of
				// rounding each), however busy the machine; the expiries are
				// compared as times, so the moments they are read at do not
				// count. (-1 for none, as a test's writer may leave a state.)
				fullAt, plainAt := c.PExpireTime(ctx, fullKey).Val(), c.PExpireTime(ctx, plainKey).Val()
				spread := float64(took.Milliseconds() + 2)
				if alg == &fixedAlgorithm {
					// A count lives an hour under the tests' clock; its expiry on
					// that clock, which countMeaning read, ends its window.
					require.GreaterOrEqual(t, plainAt.Milliseconds(), began.UnixMilli()+3_600_000-1, "case %d: the expiry (ms)", i)
					require.LessOrEqual(t, plainAt.Milliseconds(), began.Add(took).UnixMilli()+3_600_000+1, "case %d: the expiry (ms)", i)
					continue
				}
				if alg == &slidingAlgorithm && len(before) > 1 && before[1] >= 'a' {
					// An appendable log outlives its newest entry's window by
					// up to an epoch (and a ms, and one of rounding).
					_, epoch := slidingEpoch(p1)
					require.GreaterOrEqual(t, float64(plainAt.Milliseconds()), float64(fullAt.Milliseconds())-spread, "case %d: the expiries (ms)", i)
					require.LessOrEqual(t, float64(plainAt.Milliseconds()), float64(fullAt.Milliseconds()+epoch/1000+2)+spread, "case %d: the expiries (ms)", i)
					continue
				}
				require.InDelta(t, fullAt.Milliseconds(), plainAt.Milliseconds(), spread, "case %d: the expiries (ms)", i)
			}
			t.Logf("%s: %d cases decided by the plain script, %d handed to the full one", alg.name, decided, full)
			if alg == &fixedAlgorithm {
				// A fixed window's plain take hands on every refusal, and every
				// state but a count of its period.
				require.Greater(t, decided, cases/4, "cases the plain script decided")
			} else {
				require.Greater(t, decided, cases/2, "cases the plain script decided")
			}
			if alg == &slidingAlgorithm {
				// A sliding log's state means the same under any limit.
				require.Zero(t, full, "cases handed to the full script")
				// Admissions wrote both shapes, and replied with the log.
				t.Logf("sliding: admissions on the shapes: %v", shapes)
				require.Greater(t, shapes["string"], cases/20, "admissions that left a string")
				require.Greater(t, shapes["list"], cases/20, "admissions that left a list")
				require.Greater(t, shapes["log replied"], cases/20, "admissions replied with the log")
				require.Greater(t, shapes["appendable"], cases/20, "admissions that left the appendable shape")
				require.Greater(t, shapes["appended"], cases/20, "admissions appended to the log (APPEND)")
				require.Greater(t, shapes["new epoch"], cases/50, "admissions that wrote a log of an earlier epoch in now's")
				return
			}
			require.Greater(t, full, cases/20, "cases handed to the full script")
			if alg == &fixedAlgorithm {
				// Takes in the state's window replied with the count.
				require.Greater(t, shapes["count replied"], cases/20, "admissions replied with the count")
			}
		})
	}
}

// caseLimit returns the keyLimit of alg's parameters p1 and p2 (a bucket's
// interval and tau, a window's period and events).
func caseLimit(alg *algorithm, p1, p2 int64) *keyLimit {
	l := keylimit.Limit{Events: int(p2), Period: time.Duration(p1) * time.Microsecond}
	if alg == &bucketAlgorithm {
		l = keylimit.Limit{Events: 1, Period: time.Duration(p1), Burst: int(p2 / p1)}
	}
	k := newKeyLimit(&store{}, alg, l)
	if k.err != nil {
		panic(k.err)
	}
	return k
}

// plainRun runs the plain take of n under k on key at the tests' time now
// ({seconds, ns}), with the arguments the limiter passes (takeArgs.fill),
// and returns its reply and the end of the window a fixed window's take
// expected.
//
// batched, it runs the take as the coalescer sends takes that share a call
// (lua/take_batch.lua), second of two: the first the same take of a key
// without state, which must admit.
func plainRun(ctx context.Context, c *redis.Client, k *keyLimit, key string, n int, now [2]int64, batched bool) (string, int64, error) {
	a := takeArgs{script: k.alg.take, key: key, fixedClock: true, now: time.Unix(now[0], now[1])}
	a.args, a.end = k.plainArgs(n, true)
	if !batched {
		keys, args := a.fill(nil, nil)
		reply, err := k.alg.take.Run(ctx, c, keys, args...).Text()
		return reply, a.end, err
	}
	decoy := a
	decoy.key = key + ":decoy"
	c.Del(ctx, decoy.key, decoy.key+":x")
	call := scriptCall{batch: batchOf[k.alg.take]}
	for _, t := range []*takeArgs{&decoy, &a} {
		q := &queued{script: t.script}
		q.keys, q.args = t.fill(nil, nil)
		call.takes = append(call.takes, q)
	}
	call.answer(ctx, c, call.batch.Run(ctx, c, call.keys(), call.takes[0].args...))
	if q := call.takes[0]; q.err != nil || q.reply == needsFull || q.reply == "" || q.reply[0] == '0' || q.reply[0] == '!' {
		return "", 0, fmt.Errorf("the decoy's take before it: %q, %v", q.reply, q.err)
	}
	c.Del(ctx, decoy.key, decoy.key+":x")
	return call.takes[1].reply, a.end, call.takes[1].err
}

// parseCase reads a reply of a take of n under k, the full script's or the
// plain one's (which expected the window that ends at end), as the limiter
// does.
func parseCase(t *testing.T, k *keyLimit, n int, reply string, end int64) (keylimit.Result, int64) {
	res, marks := make([]keylimit.Result, 1), make([]int64, 1)
	if reply != "" && (reply[0] == '@' || reply[0] == '=' || reply[0] == '!') && k.alg.fresh != nil {
		r, mark, ok := k.alg.fresh(k, n, reply, end)
		require.True(t, ok, "reply %q", reply)
		return r, mark
	}
	require.True(t, parseReply(reply, []*keyLimit{k}, res, marks), "reply %q", reply)
	return res[0], marks[0]
}

// countMeaning returns what a fixed window's count, as dumpState dumps it
// with its expiry on the tests' clock ("count x=ms"), means under a period
// of period µs, as stateMeaning says it: its window (the one that ends a
// ms after the expiry), count and period.
func countMeaning(t *testing.T, state string, period int64) string {
	count, when, found := strings.Cut(state, " x=")
	require.True(t, found, "a count and its expiry: %q", state)
	c, err1 := strconv.ParseInt(count, 10, 64)
	ms, err2 := strconv.ParseInt(when, 10, 64)
	require.NoError(t, errors.Join(err1, err2), "state %q", state)
	require.Zero(t, (ms+1)*1000%period, "the expiry of %q ends a window of %d µs", state, period)
	return fmt.Sprintf("w=%d c=%d p=%d", (ms+1)*1000/period-1, c, period)
}

// stateMeaning returns what a state dumped by dumpState means under alg,
// whichever shape it was written in: a bucket's TAT (ns) and the rest, a
// fixed window's window index, count and period.
func stateMeaning(t *testing.T, alg *algorithm, state string) string {
	f := strings.Fields(strings.TrimPrefix(state, "@"))
	num := func(s string) int64 {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "state %q", state)
		return v
	}
	switch {
	case alg == &bucketAlgorithm && strings.HasPrefix(state, "@"):
		require.Len(t, f, 4, "state %q", state)
		return fmt.Sprintf("tat=%d %s", num(f[0])*1e9+num(f[1])+num(f[2]), f[3])
	case alg == &bucketAlgorithm && state != "none":
		tat := f[0]
		return fmt.Sprintf("tat=%d %s", num(tat[:len(tat)-9])*1e9+num(tat[len(tat)-9:]), strings.Join(f[1:], " "))
	case alg == &fixedAlgorithm && strings.HasPrefix(state, "="):
		// "=count flag period seconds µs"
		require.Greater(t, len(state), 1+fixedCountDigits, "state %q", state)
		flag := state[1+fixedCountDigits]
		f = strings.Fields(state[2+fixedCountDigits:])
		require.Len(t, f, 3, "state %q", state)
		tm, period := num(f[1])*1e6+num(f[2]), num(f[0])
		require.Equal(t, period%1e6 == 0, flag == '#', "the flag of state %q", state)
		require.Contains(t, "#:", string(flag), "the flag of state %q", state)
		return fmt.Sprintf("w=%d c=%d p=%s", (tm-(tm%period+period)%period)/period, num(strings.TrimLeft(state[1:1+fixedCountDigits], " ")), f[0])
	case alg == &fixedAlgorithm && strings.HasPrefix(state, "@"):
		require.Len(t, f, 4, "state %q", state)
		tm, period := num(f[0])*1e6+num(f[1]), num(f[3])
		return fmt.Sprintf("w=%d c=%d p=%s", (tm-(tm%period+period)%period)/period, num(f[2]), f[3])
	}
	return state
}

// plainCase returns a request of TestPlainTakeDecidesAsTheFullScript under
// alg at time now ({seconds, ns}): n, the limit's two parameters, and what
// writes the key's state before the call.
func plainCase(r *rand.Rand, alg *algorithm, now [2]int64) (n, p1, p2 int64, write func(context.Context, *redis.Client, string)) {
	events := 1 + r.Int64N(20)
	n = 1 + r.Int64N(events)
	if alg == &bucketAlgorithm {
		p1 = []int64{1e6, 7_000_001, 1e9, 60e9}[r.IntN(4)] // the interval, ns
		p2 = events * p1                                   // tau
		unit := p1
		switch r.IntN(4) {
		case 0:
			unit = []int64{1e6, 3e9, 59e9}[r.IntN(3)] // another limit's
		case 1:
			unit = 0 // a TAT alone
		}
		tat := (now[0]*1e9 + now[1]) + r.Int64N(3*p2) - p2 // behind now, or ahead by up to 2 tau
		state := fmt.Sprintf("%d", tat)
		if unit != 0 {
			state += fmt.Sprintf(" %d", unit)
			if r.IntN(3) == 0 {
				state += fmt.Sprintf(" %d", r.Int64N(p2)) // a lease time written
			} else if r.IntN(2) == 0 {
				// As a plain take of a key without state writes it: a time,
				// and the a ns its TAT is after it.
				a := 1 + r.Int64N(p2)
				state = fmt.Sprintf("@%d %d %d %d", (tat-a)/1e9, (tat-a)%1e9, a, unit)
			}
		}
		present := r.IntN(6) > 0
		return n, p1, p2, func(ctx context.Context, c *redis.Client, key string) {
			c.Del(ctx, key)
			if present {
				c.Set(ctx, key, state, 0)
			}
		}
	}
	p1 = []int64{1e6, 1_000_007, 60e6}[r.IntN(3)] // the period, µs
	if alg == &fixedAlgorithm {
		p1 = []int64{1e6, 1_007_000, 60e6}[r.IntN(3)] // whole ms: only those have a plain take
	}
	p2 = events
	if alg == &slidingAlgorithm {
		if r.IntN(2) == 0 {
			n = 1 // the take an APPEND may make
		}
		return n, p1, p2, slidingCase(r, p1, events, now)
	}
	// A state without its period (as an older version wrote it) is of the
	// limit that reads it.
	withPeriod, present := r.IntN(5) > 0, r.IntN(6) > 0
	period := p1
	if withPeriod && r.IntN(4) == 0 {
		period = []int64{1e6, 3e6, 59e6}[r.IntN(3)] // another limit's
	}
	nowUS := now[0]*1e6 + now[1]/1e3
	w := nowUS/period + r.Int64N(3) - 1 // the window before, this one, or the next (a clock stepped back)
	count := r.Int64N(events + 3)
	// Most states are strings, as the full script writes them, of a time in
	// the window, or counts, as the plain take writes them (of a window of
	// another period, or of the window before, expired, among them); the
	// others strings "@…" or hashes, as older versions wrote them.
	asString, older := withPeriod && r.IntN(8) > 0, r.IntN(6) == 0
	asCount := asString && !older && count > 0 && r.IntN(4) > 0
	if asCount && r.IntN(2) == 0 {
		w, period = nowUS/p1, p1 // most counts are of the window a take is in
	}
	in := w*period + r.Int64N(period)
	if r.IntN(2) == 0 {
		in = max(min(nowUS-nowUS%1e6+r.Int64N(1e6), (w+1)*period-1), w*period) // in now's second if the window holds it
	}
	return n, p1, p2, func(ctx context.Context, c *redis.Client, key string) {
		c.Del(ctx, key, key+":x")
		if !present {
			return
		}
		if asCount {
			// As take_fixed.lua writes it under the tests' clock: an hour to
			// live, and the expiry on that clock beside it.
			c.Set(ctx, key, count, time.Hour)
			c.Set(ctx, key+":x", (w+1)*period/1000-1, time.Hour)
			return
		}
		ttl := time.Duration(((w+1)*period-nowUS+999)/1000+3_600_000) * time.Millisecond
		if asString && older {
			c.Set(ctx, key, fmt.Sprintf("@%d %d %d %d", in/1e6, in%1e6, count, period), ttl)
			return
		}
		if asString {
			flag := ":"
			if period%1e6 == 0 {
				flag = "#"
			}
			c.Set(ctx, key, fmt.Sprintf("=%*d%s%d %d %d", fixedCountDigits, count, flag, period, in/1e6, in%1e6), ttl)
			return
		}
		fields := []any{"w", w, "c", count}
		if withPeriod {
			fields = append(fields, "p", period)
		}
		c.HSet(ctx, key, fields...)
		// The expiry its writer gave it: the end of its window, as of now
		// under the tests' clock (prelude.lua's ttl).
		c.PExpire(ctx, key, time.Duration(((w+1)*period-nowUS+999)/1000+3_600_000)*time.Millisecond)
	}
}

// slidingCase returns what writes a sliding log's state at time now
// ({seconds, ns}) for TestPlainTakeDecidesAsTheFullScript: none, or a log
// of up to events + 2 admissions (more than events: a limit lowered since),
// in order, from before the window of period µs to ahead of now (a clock
// stepped back), some of them at the same time, with the expiry its writer
// gave it; a log of up to slidingShort entries is mostly a string, as this
// version writes it (two thirds of them of the appendable shape, of this limit's
// head or another's, in this epoch or the one before, some of its entries
// out of order as an APPEND after a clock stepped back leaves them), and
// otherwise a list, as an older version wrote it.
func slidingCase(r *rand.Rand, period, events int64, now [2]int64) func(context.Context, *redis.Client, string) {
	nowUS := now[0]*1e6 + now[1]/1e3
	var log []any
	if r.IntN(6) > 0 {
		t := nowUS - 2*period + r.Int64N(2*period)
		for range 1 + r.Int64N(events+2) {
			log = append(log, t)
			if r.IntN(3) > 0 {
				t += r.Int64N(period / 2)
			}
		}
		if r.IntN(8) == 0 {
			log = append(log, nowUS+r.Int64N(period)) // ahead of now
		}
	}
	short := len(log) <= slidingShort && r.IntN(4) > 0
	appendable := short && r.IntN(3) > 0
	var state string
	var ttl time.Duration
	if appendable {
		// The appendable shape as a SET in this epoch or the one before
		// wrote it, and APPENDs after it: its entries are in that epoch or
		// before, one of them maybe below the one before it; it expires a
		// period after the epoch ends.
		p := period
		if r.IntN(6) == 0 {
			p = []int64{1e6, 3e6, 59e6}[r.IntN(3)] // another limit's head
		}
		digits, epoch := slidingEpoch(p)
		start := nowUS / epoch * epoch
		if r.IntN(4) == 0 {
			start -= epoch
		}
		state = slidingHead(caseLimit(&slidingAlgorithm, p, events)) + fmt.Sprintf("%016d", start)[:digits]
		for i, e := range log {
			v := min(e.(int64), start+epoch-1)
			if i > 0 && r.IntN(6) == 0 {
				v = log[i-1].(int64) - r.Int64N(period) // appended after a clock stepped back
			}
			state += fmt.Sprintf(" %d", v)
		}
		ttl = time.Duration((start+epoch+p-nowUS+999)/1000+1+3_600_000) * time.Millisecond
	} else if len(log) > 0 {
		newest := log[len(log)-1].(int64)
		ttl = time.Duration(max(newest+period-nowUS, 0)/1000+3_600_000) * time.Millisecond
		state = "@" + fmt.Sprint(log...)
	}
	return func(ctx context.Context, c *redis.Client, key string) {
		c.Del(ctx, key)
		if len(log) == 0 {
			return
		}
		if short {
			c.Set(ctx, key, state, ttl)
			return
		}
		c.RPush(ctx, key, log...)
		c.PExpire(ctx, key, ttl)
	}
}

// slidingMeaning returns what a sliding log dumped by dumpState holds in
// the window of period µs as of its newest time: its entries there, each
// the greatest time so far (lua/take_sliding.lua), whatever the shape.
func slidingMeaning(t *testing.T, state string, period int64) string {
	if state == "none" {
		return state
	}
	s := strings.Trim(state, "[]")
	if len(s) > 1 && s[0] == '@' && s[1] >= 'a' {
		_, s, _ = strings.Cut(s, " ")
	}
	var times []int64
	for _, f := range strings.Fields(strings.TrimPrefix(s, "@")) {
		v, err := strconv.ParseInt(f, 10, 64)
		require.NoError(t, err, "state %q", state)
		if len(times) > 0 {
			v = max(v, times[len(times)-1])
		}
		times = append(times, v)
	}
	var in []string
	for _, v := range times {
		if v > times[len(times)-1]-period {
			in = append(in, strconv.FormatInt(v, 10))
		}
	}
	return strings.Join(in, " ")
}

// dumpState returns key's state as text: a string's value, a hash's
// fields in order, or a list's entries.
func dumpState(ctx context.Context, t *testing.T, c *redis.Client, key string) string {
	switch typ := c.Type(ctx, key).Val(); typ {
	case "none":
		return "none"
	case "string":
		v := c.Get(ctx, key).Val()
		if x, err := c.Get(ctx, key+":x").Result(); err == nil && v != "" && v[0] >= '0' && v[0] <= '9' {
			v += " x=" + x // a fixed window's count, and its expiry under the tests' clock
		}
		return v
	case "hash":
		h := c.HGetAll(ctx, key).Val()
		return fmt.Sprintf("w=%s c=%s p=%s", h["w"], h["c"], h["p"])
	case "list":
		return fmt.Sprint(c.LRange(ctx, key, 0, -1).Val())
	default:
		t.Fatalf("key %s is a %s", key, typ)
		return ""
	}
}

// TestPlainTakeOfAFreshKey: a take under each algorithm with a plain script
// runs that script alone (the full script is never loaded, after SCRIPT
// FLUSH), and on a key with no state the plain take writes it without
// reading it first: TIME and SET, no GET. A sliding log's key taken again
// within its epoch (here 1,000 s) costs one APPEND more, and no SET of its
// expiry, and so does each take after it up to 8 entries. Counted in INFO commandstats, which counts the commands scripts
// run.
func TestPlainTakeOfAFreshKey(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	l := keylimit.Per(1e9, time.Second).WithBurst(1e9) // loose: every take an admission
	for _, tc := range []struct {
		alg *algorithm
		ran map[string]int64 // the commands a take of a fresh key runs
		// again: those a second take of the key runs, nil if not checked
		again map[string]int64
		make  func() (*Keyed, error)
	}{
		{&bucketAlgorithm, map[string]int64{"evalsha": 1, "eval": 1, "time": 1, "set": 1}, nil, func() (*Keyed, error) {
			b, err := NewTokenBucket(c, "fresh", l, WithPrefix("fresh:bucket:"))
			if err != nil {
				return nil, err
			}
			return &b.Keyed, nil
		}},
		{&fixedAlgorithm, map[string]int64{"evalsha": 1, "eval": 1, "incrby": 1, "time": 1, "pexpireat": 1}, map[string]int64{"evalsha": 1, "incrby": 1, "pexpiretime": 1}, func() (*Keyed, error) {
			w, err := NewFixedWindow(c, "fresh", l, WithPrefix("fresh:fixed:"))
			if err != nil {
				return nil, err
			}
			return &w.Keyed, nil
		}},
		{&slidingAlgorithm, map[string]int64{"evalsha": 1, "eval": 1, "time": 1, "set": 1}, map[string]int64{"evalsha": 1, "time": 1, "set": 1, "append": 1}, func() (*Keyed, error) {
			// A log that lives an hour: the second take finds it, however
			// long the machine stalls between the two.
			w, err := NewSlidingWindow(c, "fresh", keylimit.Per(1e9, time.Hour), WithPrefix("fresh:sliding:"))
			if err != nil {
				return nil, err
			}
			return &w.Keyed, nil
		}},
	} {
		t.Run(tc.alg.name, func(t *testing.T) {
			lim, err := tc.make()
			require.NoError(t, err)
			t.Cleanup(func() { lim.Close() })
			require.True(t, lim.Allow("warm"), "a first take")
			require.NoError(t, c.ScriptFlush(ctx).Err())
			require.NoError(t, c.ConfigResetStat(ctx).Err())
			r := lim.Take("k", 1)
			require.True(t, r.Allowed, "the take of a fresh key: %+v", r)
			require.Equal(t, 1_000_000_000-1, r.Remaining, "the take of a fresh key: %+v", r)
			ran := commandsRun(t, c)
			if tc.alg == &fixedAlgorithm && ran["set"] == 1 {
				// A take in its window's last tenth sets the expiry with SET
				// (lua/take_fixed.lua).
				ran["pexpireat"] = ran["set"]
				delete(ran, "set")
			}
			require.Equal(t, tc.ran, ran, "the commands the take of a fresh key ran")
			loaded, err := c.ScriptExists(ctx, tc.alg.take.Hash(), script.Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{true, false}, loaded, "the scripts the take loaded: the plain one, the full one")
			if tc.again == nil {
				return
			}
			// A fixed window's second take reads no number if it is in the
			// second of the first: the two takes are made again, on another
			// key, until Redis's time holds one second around them.
			var key string
			for i := 0; ; i++ {
				key = fmt.Sprintf("again:%d", i)
				before := c.Time(ctx).Val()
				require.True(t, lim.Take(key, 1).Allowed, "the first take")
				require.NoError(t, c.ConfigResetStat(ctx).Err())
				r = lim.Take(key, 1)
				ran := commandsRun(t, c)
				after := c.Time(ctx).Val()
				require.True(t, r.Allowed, "the second take: %+v", r)
				require.Equal(t, 1_000_000_000-2, r.Remaining, "the second take: %+v", r)
				if before.Unix() != after.Unix() && i < 20 {
					continue
				}
				require.Equal(t, tc.again, ran, "the commands the second take of a key ran")
				break
			}
			if tc.alg != &slidingAlgorithm {
				return
			}
			for i := 3; i <= slidingShort; i++ { // and every take up to a full string, the same
				require.NoError(t, c.ConfigResetStat(ctx).Err())
				r = lim.Take(key, 1)
				require.True(t, r.Allowed && r.Remaining == 1_000_000_000-i, "take %d: %+v", i, r)
				require.Equal(t, tc.again, commandsRun(t, c), "the commands take %d of a key ran", i)
			}
		})
	}
}

// commandsRun returns the calls of each command from INFO commandstats,
// by name, less INFO, CONFIG and the connection's handshake.
func commandsRun(t *testing.T, c *redis.Client) map[string]int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	ran := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "hello" || strings.HasPrefix(name, "config|") || strings.HasPrefix(name, "client|") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, "INFO commandstats: %q", line)
		ran[name] = n
	}
	return ran
}

// TestFixedWindowEventsWithin2To53: a FixedWindow takes up to 2^53 events
// per window, the most its script counts exactly in Lua's doubles and its
// state holds in fixedCountDigits characters; one more is an error, from
// NewFixedWindow and for a key given it by SetKeyLimit (its requests are
// refused with that error), without a call to Redis.
func TestFixedWindowEventsWithin2To53(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	t.Cleanup(func() { c.Close() })
	most := keylimit.Limit{Events: maxWindowEvents, Period: 210 * 24 * time.Hour} // at most one event per ns
	require.Less(t, len(strconv.Itoa(maxWindowEvents)), fixedCountDigits+1, "the widest count fits its field")
	w, err := NewFixedWindow(c, "most", most)
	require.NoError(t, err, "2^53 events per window")
	t.Cleanup(func() { w.Close() })
	_, err = NewFixedWindow(c, "more", keylimit.Limit{Events: maxWindowEvents + 1, Period: 210 * 24 * time.Hour})
	require.ErrorContains(t, err, "above 2^53")
	k := newKeyLimit(&store{}, &fixedAlgorithm, keylimit.Limit{Events: maxWindowEvents + 1, Period: 210 * 24 * time.Hour})
	r, never := k.never(1)
	require.True(t, never, "a request under the limit is answered without a call")
	require.ErrorContains(t, r.Err, "above 2^53")
	require.False(t, r.Allowed)
}

// TestSlidingAppendableLogUnderTheFullScript: the full script reads a log
// of the appendable shape as the plain take does, each entry counting as
// the greatest time so far (one appended after a clock stepped back), and
// entries that left the window not at all: a peek counts them so, a
// refund of an admission's mark (its time as counted) removes its entry
// and writes '@e1 e2 …', and the plain take appends to the log of its own
// head and epoch, replying with the Result the full script would give.
func TestSlidingAppendableLogUnderTheFullScript(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	k := caseLimit(&slidingAlgorithm, 1_000_000, 5) // 5 a second
	head := slidingHead(k)
	require.Equal(t, "@j51000000/5:", head)
	// The times in µs: 0.05 (left the window by 0.4), 0.1, 0.3, then 0.2
	// appended after a clock stepped back, which counts as 0.3.
	const sec int64 = 1_764_650_000
	log := fmt.Sprintf("%s%d %d %d %d %d", head, sec, (sec-1)*1e6+50_000, sec*1e6+100_000, sec*1e6+300_000, sec*1e6+200_000)
	now := []any{sec, 400_000_000} // 0.4 s
	write := func(key string) { require.NoError(t, c.Set(ctx, key, log, time.Hour).Err()) }

	write("peek")
	got, err := script.Run(ctx, c, []string{"peek"}, "peek", 1, "sliding", 1_000_000, 5, 0, now[0], now[1]).Text()
	require.NoError(t, err)
	require.Equal(t, "1 2 0 900000 0 700000", got, "a peek: 3 entries in the window, the newest at 0.3, the oldest at 0.1")

	write("refund")
	got, err = script.Run(ctx, c, []string{"refund"}, "refund", 1, "sliding", 1_000_000, 5, sec*1e6+300_000, now[0], now[1]).Text()
	require.NoError(t, err)
	require.Equal(t, "1 3 0 900000 0 700000", got, "a refund of the admission at 0.3")
	require.Equal(t, fmt.Sprintf("@%d %d %d", (sec-1)*1e6+50_000, sec*1e6+100_000, sec*1e6+300_000), c.Get(ctx, "refund").Val(),
		"the log the refund wrote: one entry of 0.3 gone, the one that left the window kept, as the full script keeps it")

	write("plain")
	write("full")
	got, _, err = plainRun(ctx, c, k, "plain", 1, [2]int64{sec, 400_000_000}, false)
	require.NoError(t, err)
	require.Equal(t, log+fmt.Sprintf(" %d", sec*1e6+400_000), got, "the plain take appends to a log of its head and epoch")
	require.Equal(t, got, c.Get(ctx, "plain").Val())
	want, err := script.Run(ctx, c, []string{"full"}, "take", 1, "sliding", 1_000_000, 5, 0, now[0], now[1]).Text()
	require.NoError(t, err)
	require.Equal(t, "1 1 0 1000000 1764650000400000 700000", want, "the full script's take")
	wantRes, wantMark := parseCase(t, k, 1, want, 0)
	gotRes, gotMark := parseCase(t, k, 1, got, 0)
	require.Equal(t, wantRes, gotRes, "the Results")
	require.Equal(t, wantMark, gotMark, "the marks")
}

// TestFixedWindowExactInEveryMillisecond: on Redis's own clock, a fixed
// window of 2 ms admits at most its 3 events in each window, with many
// goroutines taking one key for 600 ms: half of the takes are in a
// window's last ms, where a count's expiry is its window's last ms, which
// PEXPIREAT would delete at once and SET keeps (lua/take_fixed.lua). Each
// admission's mark is its window, from the server's time or from the
// count's expiry; a window that lost its count in its last ms would admit
// up to twice its events. Both ways of setting the expiry ran.
func TestFixedWindowExactInEveryMillisecond(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	const events = 3
	w, err := NewFixedWindow(c, "ms", keylimit.Per(events, 2*time.Millisecond), WithPrefix("ms:"), WithTimeout(10*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	k := w.limits.Default()
	require.True(t, k.plain, "a period of whole ms has a plain take")
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	const goroutines = 8
	perWindow := make([]map[int64]int, goroutines)
	var wg sync.WaitGroup
	stop := time.Now().Add(600 * time.Millisecond)
	for g := range perWindow {
		perWindow[g] = map[int64]int{}
		wg.Go(func() {
			res, marks := make([]keylimit.Result, 1), make([]int64, 1)
			for time.Now().Before(stop) {
				d := decision{key: "k", n: 1, parts: []*keyLimit{k}}
				if err := w.store.run(ctx, modeTake, &d, res, marks); err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed {
					perWindow[g][marks[0]]++
				}
			}
		})
	}
	wg.Wait()
	admitted := map[int64]int{}
	for _, m := range perWindow {
		for window, n := range m {
			admitted[window] += n
		}
	}
	full := 0
	for window, n := range admitted {
		require.LessOrEqual(t, n, events, "admissions in window %d", window)
		if n == events {
			full++
		}
	}
	ran := commandsRun(t, c)
	t.Logf("%d windows, %d of them full; commands: %v", len(admitted), full, ran)
	require.Greater(t, full, 50, "windows that admitted all their events")

	require.Positive(t, ran["pexpireat"], "expiries set by PEXPIREAT")
	require.Positive(t, ran["set"], "expiries set by SET, in a window's last ms")
}

// TestFixedWindowFullScriptWritesACount: a state the full script writes (a
// refund's, here) is a count, so the next take is the plain script's alone:
// INCRBY and PEXPIRETIME, no GET (the full script's read).
func TestFixedWindowFullScriptWritesACount(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	w, err := NewFixedWindow(c, "count", keylimit.PerHour(10), WithPrefix("count:"))
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	require.True(t, w.AllowN("k", 2))
	r, a := w.Admit("k", 1)
	require.True(t, r.Allowed)
	w.Refund("k", a)
	require.Equal(t, 8, w.Peek("k").Remaining, "three taken, one refunded")
	state, err := c.Get(ctx, w.StateKey("k")).Result()
	require.NoError(t, err)
	require.Equal(t, "2", state, "the state the refund wrote")
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	require.Equal(t, 7, w.Take("k", 1).Remaining)
	require.Equal(t, map[string]int64{"evalsha": 1, "incrby": 1, "pexpiretime": 1}, commandsRun(t, c), "the commands of the take after it")
}

// TestBatchOfTakes: takes that share a script call (lua/take_batch.lua) on
// the server's time, as the coalescer sends them: each decided in the
// order given as its own script would (three of six takes of one key
// admitted under a burst of three, four of six in a sliding log of four,
// which the one TIME of the call keeps in one µs: all entries equal), and
// one take's failure its own: a key of another type is its take's
// WRONGTYPE, as its script's would be, and an error of Lua's (a state it
// cannot read) is its take's ErrScript; the takes after each are decided.
func TestBatchOfTakes(t *testing.T) {
	c := serverOfItsOwn(t)
	ctx := context.Background()
	require.NoError(t, c.HSet(ctx, "hash", "f", "v").Err())
	require.NoError(t, c.Set(ctx, "unreadable", "abc", 0).Err()) // a TAT without its digits
	run := func(k *keyLimit, keys []string) []*queued {
		call := scriptCall{batch: batchOf[k.alg.take]}
		args, _ := k.plainArgs(1, false)
		for _, key := range keys {
			a := takeArgs{script: k.alg.take, key: key, args: args}
			q := &queued{script: a.script}
			q.keys, q.args = a.fill(nil, nil)
			call.takes = append(call.takes, q)
		}
		call.answer(ctx, c, call.batch.Run(ctx, c, call.keys(), call.takes[0].args...))
		return call.takes
	}
	allowed := func(k *keyLimit, q *queued) bool {
		require.NoError(t, q.err)
		r, _ := parseCase(t, k, 1, q.reply, 0)
		return r.Allowed
	}

	t.Run("bucket", func(t *testing.T) {
		k := caseLimit(&bucketAlgorithm, 1e9, 3e9) // 3 a burst, one a second
		takes := run(k, []string{"b", "b", "hash", "b", "unreadable", "b", "b", "fresh"})
		var got []bool
		for i, q := range takes {
			switch i {
			case 2:
				require.True(t, wrongType(q.err), "the take of a hash: %v", q.err)
			case 4:
				require.ErrorIs(t, scriptFailure(q.err), ErrScript, "the take Lua failed on: %v", q.err)
			default:
				got = append(got, allowed(k, q))
			}
		}
		require.Equal(t, []bool{true, true, true, false, false, true}, got, "the takes decided, in order")
	})

	t.Run("sliding", func(t *testing.T) {
		k := caseLimit(&slidingAlgorithm, 3600e6, 4) // 4 an hour
		takes := run(k, []string{"s", "s", "s", "hash", "s", "s", "s"})
		var got []bool
		for i, q := range takes {
			if i == 3 {
				require.True(t, wrongType(q.err), "the take of a hash: %v", q.err)
				continue
			}
			got = append(got, allowed(k, q))
		}
		require.Equal(t, []bool{true, true, true, true, false, false}, got, "the takes decided, in order")
		log := c.Get(ctx, "s").Val()
		entries := strings.Fields(log)[1:]
		require.Len(t, entries, 4, "the log %q", log)
		for _, e := range entries {
			require.Equal(t, entries[0], e, "the entries of one call's TIME, in %q", log)
		}
	})
}
