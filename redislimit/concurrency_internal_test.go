package redislimit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzConcurrencyReply: what a Concurrency and a calendar window read of a
// server's reply, the concurrency script's "ok held next reclaimed" (and a
// refused waiter's fifth, "ahead") and the
// calendar script's "calendar stale T" error, is taken only in its own form
// and otherwise ignored: never a panic, never a negative count or time, and
// a reply taken is the one the script would have written.
func FuzzConcurrencyReply(f *testing.F) {
	for _, s := range []string{"1 3 2500000 0", "0 5 10 2", "1 0 0 0", "2 0 0 0", "1 -1 0 0", "1 2 3", "1 2 3 4 5", "0 2 3 4 5", "0 2 3 4 -5", "0 2 3 4 5 6", "0 2 3 4 ",
		"1  2 3 4", "01 2 3 4", "1 9223372036854775807 9223372036854775807 9223372036854775807", "1 2 3 9223372036854775808",
		"", " ", "+1 2 3 4"} {
		f.Add(s)
	}
	for _, s := range []string{"redislimit: calendar stale 1764633600000000", "ERR redislimit: calendar stale 12x",
		"redislimit: calendar stale ", "redislimit: calendar stale 99999999999999999999", "calendar stale 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if rep, ok := parseConcReply(s); ok {
			require.GreaterOrEqual(t, rep.held, int64(0))
			require.GreaterOrEqual(t, rep.next, time.Duration(0))
			require.GreaterOrEqual(t, rep.reclaimed, int64(0))
			ok := 0
			if rep.ok {
				ok = 1
			}
			// The script writes integers in decimal; the time is µs, kept
			// exact below 2^63 ns.
			want := fmt.Sprintf("%d %d %d %d", ok, rep.held, rep.next/time.Microsecond, rep.reclaimed)
			if rep.ahead >= 0 {
				require.False(t, rep.ok, "reply %q: a waiter's place in a reply that acquired", s)
				want += fmt.Sprintf(" %d", rep.ahead)
			} else {
				require.Equal(t, int64(-1), rep.ahead, "reply %q", s)
			}
			if rep.next < time.Duration(1<<62) {
				require.Equal(t, want, canonical(s), "reply %q", s)
			}
		}
		if at, ok := calendarStale(errors.New(s)); ok {
			require.GreaterOrEqual(t, at, int64(0), "stale %q", s)
			require.LessOrEqual(t, at, int64(1<<62), "stale %q", s)
		}
		_, ok := calendarStale(nil)
		require.False(t, ok)
	})
}

// canonical is s with each integer field as strconv writes it: what a reply
// parseConcReply takes must read as, field for field.
func canonical(s string) string {
	var a, b, c, d, e int64
	if n, err := fmt.Sscanf(s, "%d %d %d %d %d", &a, &b, &c, &d, &e); n == 5 && err == nil {
		return fmt.Sprintf("%d %d %d %d %d", a, b, c, d, e)
	}
	if n, err := fmt.Sscanf(s, "%d %d %d %d", &a, &b, &c, &d); n != 4 || err != nil {
		return "not four integers: " + s
	}
	return fmt.Sprintf("%d %d %d %d", a, b, c, d)
}
