package redislimit

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/compose"
	"github.com/redis/go-redis/v9"
)

// FixedWindow is keylimit.FixedWindow kept in Redis: at most Limit.Events
// admissions per key in each window of Limit.Period, windows aligned to
// multiples of the period since the Unix epoch on Redis server time, as the
// in-memory limiter's are. Like it, it lets up to twice Events through
// around a window boundary; SlidingWindow does not.
//
// Each decision is one Lua script call (lua/fixed.lua). Under a Period of
// whole milliseconds the key's state is the window's count alone,
// expiring at the window's last millisecond: a take that finds it is one
// INCRBY and a read of its expiry, with no time read; a take of a key
// without state, a window's first, costs Redis an INCRBY, TIME and the
// expiry's write. (Under another Period, the state is a string that holds
// its window too; one an older version wrote is read as the same.) Events
// is at most 2^53.
// RetryAfter and ResetAfter are the time to the window's end; Remaining is
// Events minus the count. All methods are safe for concurrent use, and
// admissions are exact across the fleet.
type FixedWindow struct {
	Keyed
}

// SlidingWindow is keylimit.SlidingWindow kept in Redis: an exact sliding
// log. It admits n events iff at most Events - n admissions lie in (now -
// Period, now] on Redis server time, so no interval of length Period ever
// holds more than Events admissions for a key, across the fleet.
//
// Each decision is one Lua script call (lua/sliding.lua). The key's state
// is its admission times in the window, at most Events of them (about 10
// to 20 bytes each in Redis), expiring when the newest leaves the window
// (below): a string of up to 8 times, or a list of more. A take of a key without
// state costs TIME and one SET; a take of one event on a string written
// within the same epoch appends its time (one SET that finds the string,
// and one APPEND), where the epoch is the largest power of ten of
// microseconds not above Period. The strings a take writes so outlive
// their newest entry's window by up to an epoch and a millisecond, so that
// the takes within the epoch need not set the expiry; a list, and a string
// a refund or a joined call (keylimit.All) writes, expire when the newest
// entry leaves. RetryAfter is when
// enough of the oldest entries have left (oldest + Period - now for one
// event); ResetAfter when the newest has. All methods are safe for
// concurrent use.
type SlidingWindow struct {
	Keyed
}

// NewFixedWindow returns a FixedWindow named name that admits l.Events per
// aligned window of l.Period per key, across every instance that shares
// client's Redis and the prefix. l.Burst is not used. name says what the
// limit is for, as for NewTokenBucket.
//
// A limit per period of the calendar (keylimit.PerCalendar: a month, a day
// in a zone) counts in the calendar's windows, on Redis time: Redis has no
// tz database, so each call passes the window the zone's rules give at the
// caller's time, and one that does not hold Redis's time (a call at a
// boundary, a clock far off) is computed again at the time the script
// names, in a second call. Instances so agree as long as their tz
// databases do. Such a window admits fewer than 2^31 events per period,
// and does not lease (WithLeases). Keys given a limit per period of the
// calendar by SetKeyLimit count so too; the zone is not in the key's name,
// so a key whose zone changes keeps its count, as in memory, in a window
// that ends no earlier than the old zone's would have (keylimit.Calendar
// says which). A decision takes one more script call at the change, and
// each until that window begins, if it begins later: the script names the
// time whose window the caller must compute.
//
// It returns an error if name is not a valid name (see NewTokenBucket), if
// l is invalid (the error keylimit.Limit.Validate gives), if l.Period is not
// a whole number of microseconds (the resolution of Redis time), if l.Events
// is above 2^53 (the script counts in Lua's doubles), if client
// is nil or known to ignore context deadlines (see NewTokenBucket), or if an
// option is invalid. It does not contact Redis (see Ping).
func NewFixedWindow(client redis.UniversalClient, name string, l keylimit.Limit, opts ...Option) (*FixedWindow, error) {
	w := new(FixedWindow)
	if err := w.init(client, name, l, &fixedAlgorithm, opts, newFixedFallback); err != nil {
		return nil, err
	}
	return w, nil
}

// NewSlidingWindow returns a SlidingWindow named name that admits at most
// l.Events per l.Period per key, in any interval of that length, across
// every instance that shares client's Redis and the prefix. l.Burst is not
// used. name says what the limit is for, as for NewTokenBucket.
//
// It returns the errors NewFixedWindow does.
func NewSlidingWindow(client redis.UniversalClient, name string, l keylimit.Limit, opts ...Option) (*SlidingWindow, error) {
	w := new(SlidingWindow)
	if err := w.init(client, name, l, &slidingAlgorithm, opts, newSlidingFallback); err != nil {
		return nil, err
	}
	return w, nil
}

// The algorithms of lua/fixed.lua and lua/sliding.lua: their parameters are
// the period in µs and the events.
var (
	fixedAlgorithm = algorithm{name: "fixed", arg: "fixed", unit: time.Microsecond, params: fixedParams, canLease: true,
		take: takeFixedScript, takeArgs: fixedTakeArgs, fresh: fixedFresh, forCalendar: &calendarAlgorithm}
	slidingAlgorithm = algorithm{name: "sliding", arg: "sliding", unit: time.Microsecond, params: windowParams, tellsRefill: true,
		take: takeSlidingScript, takeArgs: slidingTakeArgs, fresh: slidingFresh}
)

// windowParams checks l for a window.
func windowParams(l keylimit.Limit) (int64, int64, int, error) {
	if err := l.Validate(); err != nil {
		return 0, 0, 0, err
	}
	if l.Period%time.Microsecond != 0 {
		return 0, 0, 0, fmt.Errorf("redislimit: period %v is not a whole number of microseconds, the resolution of Redis time", l.Period)
	}
	return int64(l.Period / time.Microsecond), int64(l.Events), l.Events, nil
}

// maxWindowEvents is the most events per window a FixedWindow takes: its
// script counts in Lua's doubles, exact below 2^53, and its state holds a
// count in fixedCountDigits characters.
const maxWindowEvents = 1 << 53

// fixedParams checks l for a FixedWindow: windowParams, and at most
// maxWindowEvents events.
func fixedParams(l keylimit.Limit) (int64, int64, int, error) {
	p1, p2, quota, err := windowParams(l)
	if err == nil && l.Events > maxWindowEvents {
		return 0, 0, 0, fmt.Errorf("redislimit: %d events per window is above 2^53, the most a FixedWindow counts exactly", l.Events)
	}
	return p1, p2, quota, err
}

// The windows are keylimit limiters that can give events back, as
// TokenBucket is.
var (
	_ keylimit.ContextLimiter[string] = (*FixedWindow)(nil)
	_ keylimit.ContextLimiter[string] = (*SlidingWindow)(nil)
)

// quota reads a calendar period's bounds (LimitOf(key).WindowAt) at the
// limiter's local time (keylimit.WithClock's, or the system's). Redis
// decides on its own clock, which at a boundary may be in the next window
// already.
func init() {
	compose.RegisterClock(func(l any) (clock.Clock, bool) {
		w, ok := l.(*FixedWindow)
		if !ok {
			return nil, false
		}
		return w.clock.injected, true
	})
}
