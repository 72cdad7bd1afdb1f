package redislimit

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
)

// The plain takes' arguments and the replies of a take that found no
// state (lua/take_bucket.lua, lua/take_fixed.lua, lua/take_sliding.lua).
// A plain take passes its numbers as the strings the script writes, so
// that the server neither reads nor prints a number in the common case;
// the caller does that arithmetic here instead.

// bucketTakeArgs: "a interval" (a = n × interval, ns), the expiry of a
// fresh state in ms (a rounded up), tau.
func bucketTakeArgs(k *keyLimit, n int, life int64) [4]any {
	a := int64(n) * k.step
	return [4]any{strconv.FormatInt(a, 10) + " " + strconv.FormatInt(k.step, 10), (a+999_999)/1_000_000 + life, k.param2, nil}
}

// bucketFresh reads "@seconds ns a interval", the state a take of n wrote
// at the server's time seconds + ns: its TAT is now + a (a fresh take's a is
// n × interval; a take on such a state writes its new TAT so). Remaining is
// the tokens left, (tau - a) / interval. The mark is the TAT as the full
// script's reply gives it, seconds then 9 digits of ns. An a below n
// intervals (the admission moved the TAT so far at least) or above tau (no
// admission leaves the TAT beyond now + tau) is malformed.
func bucketFresh(k *keyLimit, n int, reply string, _ int64) (keylimit.Result, int64, bool) {
	v, ok := freshFields(reply)
	tau := k.span // burst × interval, the script's tau (bucket.go)
	if !ok || v[1] < 0 || k.step <= 0 || v[2] < int64(max(n, 1))*k.step || v[2] > tau {
		return keylimit.Result{}, 0, false
	}
	total := v[1] + v[2]
	sec, ns := v[0]+total/1e9, total%1e9
	if sec > (math.MaxInt64-ns)/1_000_000_000 || sec < math.MinInt64/1_000_000_000+1 {
		return keylimit.Result{}, 0, false // a mark beyond int64 ns (past 2262), as the full script's reply would be
	}
	mark := sec*1e9 + ns
	if sec < 0 {
		mark = sec*1e9 - ns // the digits of sec, then ns's
	}
	r := keylimit.Result{Allowed: true, Limit: k.quota, Remaining: int(min((tau-v[2])/k.step, int64(k.quota))),
		ResetAfter: duration(v[2], time.Nanosecond)}
	r.RefillAfter = k.refillAfter(r, 0)
	return r, mark, true
}

// fixedTakeArgs: events, the period in ms, the expiry of the state of the
// window the take expects to be in (keyLimit.plainArgs sets it), and n,
// left out for 1 but under the tests' clock (life > 0), whose time follows
// it. Only a limit whose period is a whole number of ms has a plain take
// (keyLimit.plain).
func fixedTakeArgs(k *keyLimit, n int, life int64) [4]any {
	args := [4]any{k.param2, strconv.FormatInt(int64(k.limit.Period/time.Millisecond), 10), nil, nil}
	if n != 1 || life > 0 {
		args[3] = strconv.Itoa(n)
	}
	return args
}

// fixedCountDigits is the width of a fixed window's count in the state the
// full script writes (lua/fixed.lua): every count up to maxWindowEvents
// fits, and the state of a period of a second or a minute is at most 44
// bytes, which Redis keeps in one allocation with its object.
const fixedCountDigits = 16

// fixedFresh reads a plain take's decision on n under k
// (lua/take_fixed.lua): "@seconds µs", the server's time at a window's
// first take, of the window that holds it; "=count", the count after the
// take, of the window that ends at end (µs since the epoch), the one the
// take expected; or "!count seconds µs", a refusal of n on the count found
// there, at the server's time. The window's index is an admission's mark.
// Remaining is the quota less the count; ResetAfter (and a refusal's
// RetryAfter) is the time to the window's end from the server's time, or
// for an admission on a count from store.serverNow's reckoning of it (up
// to a reply's way back behind it: a ResetAfter that long too long, which
// only headers read; a refusal's, which the deny cache keeps, is exact).
// µs outside a second, an admission's count below n (an admission counts
// itself) or above the quota, or a refusal's count on which n fits is
// malformed.
func fixedFresh(k *keyLimit, n int, reply string, end int64) (keylimit.Result, int64, bool) {
	period := int64(k.limit.Period / time.Microsecond)
	if len(reply) < 2 || period <= 0 {
		return keylimit.Result{}, 0, false
	}
	count, t := int64(n), int64(0)
	switch reply[0] {
	case '@': // seconds, µs
		var ok bool
		if t, ok = serverTime(reply[1:]); !ok {
			return keylimit.Result{}, 0, false
		}
		end = (windowIndex(t, period) + 1) * period // the script's window
		k.owner.sawServerTime(t)
	case '=':
		var err error
		if count, err = strconv.ParseInt(reply[1:], 10, 64); err != nil || end%period != 0 {
			return keylimit.Result{}, 0, false
		}
		t = min(k.owner.serverNow(), end)
	case '!': // count, then seconds, µs
		countText, rest, found := strings.Cut(reply[1:], " ")
		var err error
		var ok bool
		count, err = strconv.ParseInt(countText, 10, 64)
		if t, ok = serverTime(rest); !found || err != nil || !ok || end%period != 0 {
			return keylimit.Result{}, 0, false
		}
		t = min(t, end)
		k.owner.sawServerTime(t)
	default:
		return keylimit.Result{}, 0, false
	}
	left := duration(end-t, time.Microsecond)
	if reply[0] == '!' {
		// A refusal: the count found, which n did not fit on.
		if count < 0 || count+int64(n) <= int64(k.quota) {
			return keylimit.Result{}, 0, false
		}
		r := keylimit.Result{Limit: k.quota, Remaining: int(max(int64(k.quota)-count, 0)), RetryAfter: left}
		if count > 0 {
			r.ResetAfter = left
		}
		r.RefillAfter = k.refillAfter(r, 0)
		return r, 0, true
	}
	if count < int64(max(n, 1)) || count > int64(k.quota) {
		return keylimit.Result{}, 0, false
	}
	r := keylimit.Result{Allowed: true, Limit: k.quota, Remaining: int(int64(k.quota) - count), ResetAfter: left}
	r.RefillAfter = k.refillAfter(r, 0)
	return r, end/period - 1, true
}

// serverTime reads "seconds µs", Redis's TIME as a script replies it, in µs
// since the epoch: false for µs outside a second or a time beyond int64 µs.
func serverTime(s string) (int64, bool) {
	secText, usText, found := strings.Cut(s, " ")
	sec, err1 := strconv.ParseInt(secText, 10, 64)
	us, err2 := strconv.ParseInt(usText, 10, 64)
	if !found || err1 != nil || err2 != nil || us < 0 || us >= 1e6 || sec > math.MaxInt64/1_000_000-1 || sec < math.MinInt64/1_000_000+1 {
		return 0, false
	}
	return sec*1e6 + us, true
}

// windowIndex is the index of the window of period µs that holds t, µs
// since the epoch: t / period rounded down, before 1970 too (the root
// package's floorDiv, which this module cannot import).
func windowIndex(t, period int64) int64 {
	q := t / period
	if t%period != 0 && t < 0 {
		q--
	}
	return q
}

// slidingTakeArgs: the expiry in ms of a log of the appendable shape (the
// period and an epoch, rounded up, and a ms), the head of that shape
// (slidingHead), and n, left out for 1 but under the tests' clock (life >
// 0), whose time follows it.
func slidingTakeArgs(k *keyLimit, n int, life int64) [4]any {
	period := int64(k.limit.Period / time.Microsecond)
	_, epoch := slidingEpoch(period)
	var args [4]any
	args[0], args[slidingHeadArg] = (period+epoch+999)/1000+1+life, slidingHead(k)
	if n != 1 || life > 0 {
		args[2] = n
	}
	return args
}

// slidingHeadArg is the index of the head in slidingTakeArgs, which
// slidingFresh reads from a limit's take1 rather than make it again.
const slidingHeadArg = 1

// slidingShort is the most entries a sliding log keeps in a string (lua/sliding.lua); a longer log is
// a list.
const slidingShort = 8

// slidingEpoch returns, for a period of p µs, the digits of a time of 16
// digits in µs that name its epoch (lua/take_sliding.lua), and the epoch's
// length in µs: the largest power of ten not above p.
func slidingEpoch(p int64) (digits int, length int64) {
	length = 1
	for length <= p/10 {
		length *= 10
	}
	digits = 16
	for l := length; l > 1; l /= 10 {
		digits--
	}
	return digits, length
}

// slidingHead is the head of a sliding log of the appendable shape under
// k's limit (lua/take_sliding.lua): '@', a letter for the epoch's digits,
// a digit for min(events, slidingShort), the period in µs, '/', the
// events, ':'.
func slidingHead(k *keyLimit) string {
	period := int64(k.limit.Period / time.Microsecond)
	digits, _ := slidingEpoch(period)
	return "@" + string(rune('a'+digits-1)) + string(rune('0'+min(k.limit.Events, slidingShort))) +
		strconv.FormatInt(period, 10) + "/" + strconv.Itoa(k.limit.Events) + ":"
}

// slidingFresh reads a sliding log of at most slidingShort entries that a
// take of n wrote at the server's time and replied (lua/take_sliding.lua),
// in either shape:
//   - the appendable one, k's head, the epoch's digits, then ' ' and 16
//     digits for each entry: an entry's time is the greatest of its own and
//     those before it; the newest raw entry is the server's time (clock),
//     the newest time the admission's (now, the mark); entries that had left
//     the window may remain;
//   - '@e1 e2 …', in order, all within the window.
//
// Remaining is the limit's events less the entries in the window; the log
// is full a period after now, and more quota comes back when the oldest in
// the window leaves it. A reply that cannot be such a log (not of k's head,
// more than slidingShort entries, fewer than n in the window or more than
// the limit's events, the last n not at now, in the older shape out of order
// or spanning a period) is malformed.
func slidingFresh(k *keyLimit, n int, reply string, _ int64) (keylimit.Result, int64, bool) {
	period := int64(k.limit.Period / time.Microsecond)
	if n < 1 || period <= 0 || len(reply) < 2 {
		return keylimit.Result{}, 0, false
	}
	appendable := reply[1] >= 'a'
	var s string
	if appendable {
		head, ok := k.take1[slidingHeadArg].(string) // slidingHead(k), made once
		if !ok {
			head = slidingHead(k)
		}
		rest, found := strings.CutPrefix(reply, head)
		digits, _ := slidingEpoch(period)
		if !found || len(rest) < digits+1 || rest[digits] != ' ' {
			return keylimit.Result{}, 0, false
		}
		for _, c := range rest[:digits] {
			if c < '0' || c > '9' {
				return keylimit.Result{}, 0, false
			}
		}
		s = rest[digits+1:]
	} else {
		s = reply[1:]
	}
	var times [slidingShort]int64
	entries, clock := 0, int64(0)
	for more := true; more; {
		var field string
		field, s, more = strings.Cut(s, " ")
		if appendable && len(field) != 16 {
			return keylimit.Result{}, 0, false
		}
		e, err := strconv.ParseInt(field, 10, 64)
		if err != nil || entries == slidingShort {
			return keylimit.Result{}, 0, false
		}
		clock = e
		if entries > 0 && e < times[entries-1] {
			if !appendable {
				return keylimit.Result{}, 0, false
			}
			e = times[entries-1] // the greatest so far
		}
		times[entries] = e
		entries++
	}
	now := times[entries-1]
	// first: the oldest in the window (< 0: a difference beyond int64).
	first := 0
	for now-times[first] >= period || now-times[first] < 0 {
		if !appendable {
			return keylimit.Result{}, 0, false
		}
		first++
	}
	count := entries - first
	if count < n || count > k.quota || times[entries-n] != now || now-clock < 0 || now-clock > period {
		return keylimit.Result{}, 0, false
	}
	r := keylimit.Result{Allowed: true, Limit: k.quota, Remaining: k.quota - count, ResetAfter: duration(now+period-clock, time.Microsecond)}
	r.RefillAfter = k.refillAfter(r, duration(times[first]+period-clock, time.Microsecond))
	return r, now, true
}

// freshFields reads the four integers of a fresh state, "@a b c d".
func freshFields(reply string) (v [4]int64, ok bool) {
	s, found := strings.CutPrefix(reply, "@")
	if !found {
		return v, false
	}
	for i := range v {
		field, rest, more := strings.Cut(s, " ")
		if more != (i < len(v)-1) {
			return v, false
		}
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return v, false
		}
		v[i], s = n, rest
	}
	return v, true
}
