package redislimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keylimit/keylimit"
)

// A FixedWindow of a limit per period of the calendar (keylimit.PerCalendar)
// is lua/calendar.lua's: Redis has no tz database, so each call passes the
// window that holds the caller's time, computed from the zone's rules
// (keylimit.Limit.WindowAt), and the script decides on Redis time in it.
// Near a boundary, the caller's clock and Redis's may see different
// windows: then the script names its time instead of deciding, and the
// call is made again with the window at that time (calendarStale). So the
// decision is Redis's, on its clock, and every instance that has the same
// zone's rules computes the same window for it.

var calendarAlgorithm = algorithm{name: "calendar", arg: "calendar", unit: time.Microsecond, params: calendarParams,
	timed: newCalendarArgs}

// maxCalendarEvents bounds a calendar window's events on Redis: they share
// a double with the window's length (see lua/calendar.lua).
const maxCalendarEvents = 1<<31 - 1

// calendarParams checks l for a calendar window. Its parameters depend on
// the time, and are made for each call (calendarArgs); the ones returned
// here are never sent.
func calendarParams(l keylimit.Limit) (int64, int64, int, error) {
	// keylimit's FixedWindow says what is wrong with a limit no window
	// can take (the in-memory fallback is one).
	w, err := keylimit.NewFixedWindow[string](l)
	if err != nil {
		return 0, 0, 0, err
	}
	w.Close()
	if l.Calendar == 0 {
		return 0, 0, 0, errors.New("redislimit: a calendar window's limit has no Calendar")
	}
	if l.Events > maxCalendarEvents {
		return 0, 0, 0, fmt.Errorf("redislimit: a calendar window admits at most %d events, not %d (%v)", maxCalendarEvents, l.Events, l)
	}
	return 0, 0, l.Events, nil
}

// calendarArgs makes the script's parameters of one calendar limit for a
// time: its window's start, and its length and the events packed in one
// integer. It keeps the last window's, boxed, so that a call within it
// does not allocate.
type calendarArgs struct {
	limit keylimit.Limit
	last  atomic.Pointer[calendarWindow]
}

type calendarWindow struct {
	start, end int64 // Unix seconds
	p1, p2     any
}

// newCalendarArgs returns the calendarArgs of l, and the RetryAfter of a
// refusal under FailClosed: the current window's length per event.
func newCalendarArgs(l keylimit.Limit) (timedArgs, time.Duration) {
	var retry time.Duration
	if start, end := l.WindowAt(time.Now()); l.Events > 0 {
		retry = end.Sub(start) / time.Duration(l.Events)
	}
	return &calendarArgs{limit: l}, retry
}

// params returns the parameters of the window that holds t (Unix ns; 0:
// now on sc, the tests' script clock, or the system's if nil), and t.
func (c *calendarArgs) params(t int64, sc *scriptClock) (p1, p2 any, at int64) {
	if t == 0 {
		switch {
		case sc != nil && sc.calendar != nil:
			t = sc.calendar.Now().UnixNano()
		case sc != nil:
			t = sc.c.Now().UnixNano()
		default:
			t = time.Now().UnixNano()
		}
	}
	p1, p2 = c.at(t)
	return p1, p2, t
}

// at returns the parameters of the window that holds t (Unix ns).
func (c *calendarArgs) at(t int64) (p1, p2 any) {
	s := t / 1e9
	if w := c.last.Load(); w != nil && w.start <= s && s < w.end {
		return w.p1, w.p2
	}
	start, end := c.limit.WindowAt(time.Unix(0, t))
	w := &calendarWindow{start: start.Unix(), end: end.Unix()}
	w.p1, w.p2 = w.start, (w.end-w.start)<<31|int64(c.limit.Events)
	c.last.Store(w)
	return w.p1, w.p2
}

// again is calendarStale's: a call is made again at the time the script
// names when its window did not hold Redis's time.
func (c *calendarArgs) again(err error) (int64, bool) { return calendarStale(err) }

// calendarStale reads the script's "redislimit: calendar stale T" (T in µs
// on Redis's clock) and returns T in ns.
func calendarStale(err error) (int64, bool) {
	const tag = "redislimit: calendar stale "
	if err == nil {
		return 0, false
	}
	msg := err.Error()
	i := strings.Index(msg, tag)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(tag):]
	if j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
		rest = rest[:j]
	}
	us, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || us > 1<<62/1000 {
		return 0, false
	}
	return us * 1000, true
}
