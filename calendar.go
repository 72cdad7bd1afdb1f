package keylimit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Calendar is a period of the calendar that a FixedWindow's windows may
// follow instead of a fixed Period: an hour, a day, an ISO week (from
// Monday) or a month of a time zone's clock. Months are 28 to 31 days, and
// a day the zone changes its clock is 23 or 25 hours, so no Period says
// them.
//
// A window of a Calendar begins at the first instant at which the zone's
// clock reads its start (hh:00, 00:00, Monday 00:00, the 1st at 00:00) or
// later, and ends where the next one begins. So a daily window resets at
// local midnight whatever the day's length; the hour the clock repeats
// when it goes back is one Hourly window of two hours, and the hour it
// skips has none.
//
// A key whose zone changes (SetKeyLimit's function gives it another
// Location of the same Calendar) keeps the count of its current window,
// which then ends at the new zone's first boundary at or after the old
// window's end: the new zone's window that holds the old one's last second.
// A change of zone never ends a window early, nor hands out a fresh quota;
// the window may end up to one period later than the old zone's would have.
type Calendar uint8

// The calendar periods. The zero Calendar is none: windows of Limit.Period.
const (
	Hourly  Calendar = iota + 1 // an hour of the zone's clock
	Daily                       // a day, from midnight to midnight
	Weekly                      // an ISO week, from Monday at midnight
	Monthly                     // a month, from the 1st at midnight
)

// name is the period's word in a limit's text form: "hour", "day",
// "week", "month"; "" for none.
func (c Calendar) name() string {
	switch c {
	case Hourly:
		return "hour"
	case Daily:
		return "day"
	case Weekly:
		return "week"
	case Monthly:
		return "month"
	case 0:
		return ""
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// nominal is the usual length of c's periods, in seconds: what an index
// of its periods counts by, and the evictor's span.
func (c Calendar) nominal() int64 {
	switch c {
	case Hourly:
		return 3600
	case Daily:
		return 86400
	case Weekly:
		return 7 * 86400
	}
	return 28 * 86400 // the shortest month: the most months a span holds
}

// PerCalendar returns a Limit of events per period c of the calendar in
// loc (nil: UTC), for a FixedWindow: PerCalendar(10000, Monthly, loc) is
// 10,000 a month, from the 1st at midnight in loc.
func PerCalendar(events int, c Calendar, loc *time.Location) Limit {
	return Limit{Events: events, Calendar: c, Location: loc}
}

// WindowAt returns the window of l that holds t: for a Calendar limit, the
// period of the calendar in l.Location; otherwise the window of l.Period
// aligned to the Unix epoch, as a FixedWindow counts in. It returns zero
// times for a Limit that is not valid for a FixedWindow.
func (l Limit) WindowAt(t time.Time) (start, end time.Time) {
	if l.validateWindow() != nil {
		return time.Time{}, time.Time{}
	}
	if l.Calendar == 0 {
		p := int64(l.Period)
		s := floorDiv(t.UnixNano(), p) * p
		return time.Unix(0, s), time.Unix(0, s+p)
	}
	lab := labelOf(l.Calendar, l.location(), t.Unix())
	return time.Unix(lab.start, 0), time.Unix(lab.end, 0)
}

// location is l's zone: Location, or UTC.
func (l Limit) location() *time.Location {
	if l.Location == nil {
		return time.UTC
	}
	return l.Location
}

// A period of the calendar is named by its label: its start on the zone's
// clock, read as if the clock were UTC (wall seconds), where the arithmetic
// of days and months has no zone changes in it.

// truncate returns the label of the period of c that the wall time u (wall
// seconds) is in.
func truncate(c Calendar, u int64) int64 {
	switch c {
	case Hourly:
		return floorDiv(u, 3600) * 3600
	case Daily:
		return floorDiv(u, 86400) * 86400
	case Weekly:
		// 1970-01-01 was a Thursday: Mondays are 4 days after a multiple
		// of a week.
		return floorDiv(u-4*86400, 7*86400)*7*86400 + 4*86400
	}
	y, m, _ := time.Unix(u, 0).UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC).Unix()
}

// next returns the label of the period after the one labelled u.
func next(c Calendar, u int64) int64 {
	if c == Monthly {
		return time.Unix(u, 0).UTC().AddDate(0, 1, 0).Unix()
	}
	return u + c.nominal()
}

// number returns the label u as a count of periods of c since the label
// base (a period number, for the packed word): labels differ by whole
// periods, counted in months for Monthly.
func number(c Calendar, u int64) int64 {
	if c == Monthly {
		y, m, _ := time.Unix(u, 0).UTC().Date()
		return int64(y)*12 + int64(m) - 1
	}
	return floorDiv(u, c.nominal())
}

// fromNumber is number's inverse (for labels truncate returns).
func fromNumber(c Calendar, k int64) int64 {
	switch c {
	case Monthly:
		y, m := floorDiv(k, 12), k-floorDiv(k, 12)*12
		return time.Date(int(y), time.Month(m+1), 1, 0, 0, 0, 0, time.UTC).Unix()
	case Weekly:
		return k*c.nominal() + 4*86400 // Mondays: see truncate
	}
	return k * c.nominal()
}

// firstReading returns the first instant (Unix seconds) at which loc's
// clock reads the wall time u or later. Within one of the zone's spans of
// one offset the clock runs as time does, so the first such instant of a
// span is the later of its start and u − offset, if that is before its
// end; the first span that has one holds the answer. No zone is more than
// a day from UTC, so no instant a day before u reads u, and the search
// starts there; it visits the few spans of two days.
func firstReading(loc *time.Location, u int64) int64 {
	x := u - 86400
	for range 64 {
		t := time.Unix(x, 0).In(loc)
		_, off := t.Zone()
		cand := max(x, u-int64(off))
		_, end := t.ZoneBounds()
		if end.IsZero() || cand < end.Unix() {
			return cand
		}
		x = end.Unix()
	}
	return x // not reached with a zone of the tz database
}

// label is one period of the calendar: its label and its instants.
type label struct {
	wall       int64 // the label, in wall seconds
	start, end int64 // Unix seconds: [start, end)
}

// labelOf returns the period of c in loc that holds the instant x (Unix
// seconds). The period the clock reads at x has begun (its start was read
// at or before x); if the clock went back, a later period may have begun
// too, and the latest one that has holds x.
func labelOf(c Calendar, loc *time.Location, x int64) label {
	_, off := time.Unix(x, 0).In(loc).Zone()
	u := truncate(c, x+int64(off))
	lab := label{wall: u, start: firstReading(loc, u)}
	for {
		n := next(c, lab.wall)
		lab.end = firstReading(loc, n)
		if lab.end > x {
			return lab
		}
		lab = label{wall: n, start: lab.end}
	}
}

// calendarGrid is a windowGrid's arithmetic for a Calendar: windows are
// numbered from 1, the period whose label is base, in the limiter's time
// (ns since its creation, startUnix ns since the Unix epoch).
type calendarGrid struct {
	cal       Calendar
	loc       *time.Location
	startUnix int64
	base      int64 // number of window 1's label
	// last is the window last computed, which nearly every decision is
	// in: the grid computes a period from the zone only when time moves
	// out of it. Racing writers store equal values.
	last atomic.Pointer[calendarWindow]
}

// calendarWindow is window w of a calendarGrid, [start, end) in the
// limiter's time.
type calendarWindow struct {
	w          uint64
	start, end int64
}

func newCalendarGrid(c Calendar, loc *time.Location, startUnix int64) *calendarGrid {
	// Window 1 is at least a day before the earliest clamped time, so no
	// clamped time's label is below it.
	earliest := floorDiv(startUnix-int64(maxSpan), 1e9) - 2*86400
	return &calendarGrid{cal: c, loc: loc, startUnix: startUnix, base: number(c, truncate(c, earliest))}
}

// maxIndex bounds the windows of clamped times (see newWindowRules).
func (c Calendar) maxIndex() uint64 {
	return uint64(3<<60)/uint64(c.nominal()*1e9) + 8
}

// toLimiter converts Unix seconds to the limiter's time.
func (g *calendarGrid) toLimiter(s int64) int64 { return s*1e9 - g.startUnix }

// window returns window w, from the cache or the zone.
func (g *calendarGrid) window(w uint64) *calendarWindow {
	if c := g.last.Load(); c != nil && c.w == w {
		return c
	}
	u := fromNumber(g.cal, g.base+int64(w)-1)
	start := firstReading(g.loc, u)
	end := firstReading(g.loc, next(g.cal, u))
	// Not kept: the cache is for now's window, which index keeps; the
	// windows of idle keys (the evictor's) would push it out.
	return &calendarWindow{w: w, start: g.toLimiter(start), end: g.toLimiter(end)}
}

// index returns the window that holds now. The grid's methods are not
// inlined: windowRules' of the same names test for a Calendar and call
// them, and stay small enough to inline on a Period's path.
//
//go:noinline
func (g *calendarGrid) index(now int64) uint64 {
	if c := g.last.Load(); c != nil && c.start <= now && now < c.end {
		return c.w
	}
	c := g.at(now)
	g.last.Store(c)
	return c.w
}

// indexAt is index for a time that need not be now: the window is not
// kept (the cache is for now's).
func (g *calendarGrid) indexAt(t int64) uint64 {
	if c := g.last.Load(); c != nil && c.start <= t && t < c.end {
		return c.w
	}
	return g.at(t).w
}

// at computes the window that holds t from the zone.
func (g *calendarGrid) at(t int64) *calendarWindow {
	// Whole seconds: boundaries are on them, so the second that holds t
	// is in t's window.
	x := floorDiv(t+g.startUnix, 1e9)
	lab := labelOf(g.cal, g.loc, x)
	return &calendarWindow{
		w:     uint64(number(g.cal, lab.wall)-g.base) + 1,
		start: g.toLimiter(lab.start),
		end:   g.toLimiter(lab.end),
	}
}

//go:noinline
func (g *calendarGrid) start(w uint64) int64 { return g.window(w).start }

//go:noinline
func (g *calendarGrid) end(w uint64) int64 { return g.window(w).end }

// current is windowGrid.current on the calendar's windows.
//
//go:noinline
func (g *calendarGrid) current(w uint64, now int64) uint64 {
	if c := g.last.Load(); c != nil && c.start <= now && now < c.end {
		// now's window is the cache's: a key's earlier window has ended
		// (the first call of each key after a boundary costs no zone
		// arithmetic), and a later one is the key's (the clock stepped
		// back).
		return max(w, c.w)
	}
	if w != 0 && now < g.end(w) {
		return w
	}
	return g.index(now)
}

// zones holds the locations the text form has loaded, by name, so that
// limits parsed from one text share one *time.Location (and so compare
// equal, and share a per-key config). Only names the tz database has are
// kept: a few hundred at most.
var zones sync.Map // string → *time.Location

// loadZone returns the location named name, as time.LoadLocation does,
// once per name. Only names as the tz database writes them are asked for
// (letters, digits, "_+-", segments between single slashes), so that one
// zone has one name in the cache, and text cannot grow it.
func loadZone(name string) (*time.Location, error) {
	if !zoneName(name) {
		return nil, fmt.Errorf("keylimit: %q is not a zone's name", name)
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	got, _ := zones.LoadOrStore(name, loc)
	return got.(*time.Location), nil
}

// zoneName reports whether name is written as the tz database writes its
// zones' names: "Europe/Bucharest", "America/Argentina/Buenos_Aires",
// "Etc/GMT+2", "UTC".
func zoneName(name string) bool {
	if name == "" || name[0] == '/' || name[len(name)-1] == '/' || strings.Contains(name, "//") {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_' || c == '+' || c == '-' || c == '/':
		default:
			return false
		}
	}
	return true
}
