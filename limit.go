package keylimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keylimit/keylimit/internal/keystore"
)

// maxSpan bounds every span a limiter stores (Burst × interval, a window's
// Period): 2^60 ns, about 36 years. With times clamped to the horizon (see
// clock.go), a timestamp plus two spans stays below 2^62 and never overflows.
const maxSpan = keystore.MaxSpan

// InfDuration is the RetryAfter of a request that can never pass, because it
// asks for more events than the limit admits at once.
const InfDuration = time.Duration(math.MaxInt64)

// ErrExceedsLimit is wrapped by errors for requests that can never be admitted
// because n is larger than the most a limiter admits at once (Burst for a
// bucket, Events for a window). Waiting would never help.
var ErrExceedsLimit = errors.New("keylimit: n exceeds the limit")

// Limit is a rate: Events per Period, and for a TokenBucket, how many of them
// may come at once (Burst). For a FixedWindow it may instead be Events per
// period of the calendar (Calendar) in a time zone (Location): see
// PerCalendar.
//
// The zero Limit is invalid; constructors report it as an error.
type Limit struct {
	Events int           // events admitted per Period; at least 1
	Period time.Duration // at least 1 ns; 0 with a Calendar
	Burst  int           // TokenBucket only: most events admitted at once; 0 means Events

	// Calendar, if not 0, makes a FixedWindow's windows the periods of
	// the calendar in Location (nil: UTC) instead of windows of Period,
	// which must then be 0. Only a FixedWindow takes such a Limit.
	Calendar Calendar
	Location *time.Location

	// burstSet records that WithBurst chose Burst, so that WithBurst(0) is
	// reported as an error instead of silently meaning "Events".
	burstSet bool
}

// Per returns a Limit of events per period.
func Per(events int, period time.Duration) Limit {
	return Limit{Events: events, Period: period}
}

// PerSecond is shorthand for Per(n, time.Second).
func PerSecond(n int) Limit { return Per(n, time.Second) }

// PerMinute is shorthand for Per(n, time.Minute).
func PerMinute(n int) Limit { return Per(n, time.Minute) }

// PerHour is shorthand for Per(n, time.Hour).
func PerHour(n int) Limit { return Per(n, time.Hour) }

// WithBurst returns a copy of l that admits at most b events at once. It only
// matters to a TokenBucket; a window admits Events per window whatever Burst is.
// A b below 1 makes the Limit invalid.
func (l Limit) WithBurst(b int) Limit {
	l.Burst = b
	l.burstSet = true
	return l
}

// BurstSize is the most events a TokenBucket with this Limit admits at once:
// Burst, or Events when Burst is 0.
func (l Limit) BurstSize() int {
	if l.Burst == 0 && !l.burstSet {
		return l.Events
	}
	return l.Burst
}

// FillTime is the time an empty TokenBucket of l takes to refill fully,
// BurstSize × Period / Events, rounded up to a whole nanosecond and computed
// exactly (BurstSize × Interval would round each token up: PerSecond(3)
// would take 1.000000002 s). It is the w of the RateLimit-Policy field of a
// bucket. It is Period for a Limit with no Events, and the largest Duration
// when the product does not fit in one.
func (l Limit) FillTime() time.Duration {
	if l.Events < 1 || l.Period < 1 || l.BurstSize() < 1 {
		return l.Period
	}
	hi, lo := bits.Mul64(uint64(l.Period), uint64(l.BurstSize()))
	if hi >= uint64(l.Events) {
		return time.Duration(1<<63 - 1)
	}
	q, rem := bits.Div64(hi, lo, uint64(l.Events))
	if rem != 0 {
		q++
	}
	return time.Duration(min(q, 1<<63-1))
}

// interval is the time one event's token takes to refill: Period / Events,
// rounded up to a whole nanosecond, so that a bucket never refills faster than
// the limit says. The rounding costs less than 1 ns per token (PerSecond(3)
// refills one token every 333,333,334 ns). It is 0 for an invalid Limit.
func (l Limit) interval() time.Duration {
	if l.Events < 1 || l.Period < 1 || l.Calendar != 0 {
		return 0
	}
	ev := time.Duration(l.Events)
	return (l.Period + ev - 1) / ev
}

// Validate reports what is wrong with l for a token bucket, or nil.
// Constructors call it; it is exported for callers that build limits from
// configuration and want to check them early.
func (l Limit) Validate() error {
	if err := l.validateWindow(); err != nil {
		return err
	}
	if l.Calendar != 0 {
		return fmt.Errorf("keylimit: %v is a FixedWindow's limit: a period of the calendar has no steady rate", l)
	}
	if l.Events > int(l.Period) {
		return fmt.Errorf("keylimit: %d events per %v is more than one per nanosecond", l.Events, l.Period)
	}
	if time.Duration(l.BurstSize()) > maxSpan/l.interval() {
		return fmt.Errorf("keylimit: burst %d at one event per %v spans more than %v", l.BurstSize(), l.interval(), maxSpan)
	}
	return nil
}

// validateWindow checks what a window limiter needs: Events and Period.
func (l Limit) validateWindow() error {
	if l.Events < 1 {
		return fmt.Errorf("keylimit: events %d is below 1", l.Events)
	}
	if l.Calendar != 0 {
		switch {
		case l.Calendar > Monthly:
			return fmt.Errorf("keylimit: calendar %d is none of Hourly, Daily, Weekly, Monthly", uint8(l.Calendar))
		case l.Period != 0:
			return fmt.Errorf("keylimit: a limit per %v has no Period, not %v", l.Calendar.name(), l.Period)
		}
	} else if l.Location != nil {
		return fmt.Errorf("keylimit: a Location (%v) is for a limit per period of the calendar, which has no Calendar", l.Location)
	}
	if l.Calendar == 0 && l.Period <= 0 {
		return fmt.Errorf("keylimit: period %v is not positive", l.Period)
	}
	if l.Calendar == 0 && l.Period > maxSpan {
		return fmt.Errorf("keylimit: period %v is longer than %v", l.Period, maxSpan)
	}
	if l.Burst < 0 || (l.burstSet && l.Burst < 1) {
		return fmt.Errorf("keylimit: burst %d is below 1", l.Burst)
	}
	return nil
}

// span is the length of l's windows: Period, or the usual length of a
// Calendar's periods (a month's is 28 days).
func (l Limit) span() time.Duration {
	if l.Calendar != 0 {
		return time.Duration(l.Calendar.nominal()) * time.Second
	}
	return l.Period
}

// per names l's window for errors: "1m0s", "month in Europe/Bucharest".
func (l Limit) per() string {
	if l.Calendar != 0 {
		return l.Calendar.name() + " in " + l.location().String()
	}
	return l.Period.String()
}

// The units a Limit's text may name its Period by, and String uses for a
// Period of exactly one of them.
var periodUnits = []struct {
	name  string
	d     time.Duration
	alias []string
}{
	{"ms", time.Millisecond, []string{"millisecond"}},
	{"s", time.Second, []string{"sec", "second"}},
	{"min", time.Minute, []string{"m", "minute"}},
	{"h", time.Hour, []string{"hr", "hour"}},
	{"d", 24 * time.Hour, []string{"day"}},
}

// maxLimitText bounds the text UnmarshalText reads, so that a configuration
// value cannot make it do unbounded work.
const maxLimitText = 128

// String formats l in the text form UnmarshalText reads: "10/min",
// "10/s burst 20", "7/1m30s", "10000/month", "500/day in Europe/Bucharest".
// A Location not from the tz database (time.FixedZone) is written by its
// name, which UnmarshalText does not read.
func (l Limit) String() string {
	b, _ := l.MarshalText()
	return string(b)
}

// MarshalText formats l as String does, so that a Limit is a string in JSON,
// YAML and other text encodings. It never fails.
func (l Limit) MarshalText() ([]byte, error) {
	b := strconv.AppendInt(nil, int64(l.Events), 10)
	b = append(b, '/')
	if l.Calendar != 0 {
		b = append(b, l.Calendar.name()...)
		// Without a zone, "hour" and "day" would read as Periods.
		if l.Location != nil || l.Calendar == Hourly || l.Calendar == Daily {
			b = append(b, " in "...)
			b = append(b, l.location().String()...)
		}
	} else {
		unit := ""
		for _, u := range periodUnits {
			if l.Period == u.d {
				unit = u.name
			}
		}
		if unit == "" {
			unit = l.Period.String()
		}
		b = append(b, unit...)
	}
	if l.burstSet || l.Burst != 0 {
		b = append(b, " burst "...)
		b = strconv.AppendInt(b, int64(l.Burst), 10)
	}
	return b, nil
}

// UnmarshalText parses text, the text form of a Limit, into l: Events, a slash, and the Period
// as a unit (ms, s, min, h, d, or their long names) or a Go duration
// ("90s", "1m30s"), optionally followed by "burst" and the Burst:
//
//	100/min
//	10/s burst 20
//	5000/1h30m
//
// A period of the calendar (a FixedWindow's, see PerCalendar) is "week" or
// "month", or any of them with "in" and a zone of the tz database; "hour"
// and "day" are periods of the calendar only with a zone (without one they
// are Periods, whose windows are UTC's hours and days too):
//
//	10000/month
//	500/day in Europe/Bucharest
//	50/hour in America/New_York
//
// An unknown zone is an error. The zone is loaded once per name
// (time.LoadLocation: the system's tz database, or time/tzdata if the
// program imports it), so that limits parsed from the same text are equal.
//
// It checks the Limit with Validate (a Limit per period of the calendar as
// a FixedWindow does), so that a limit loaded from JSON, YAML or a flag
// (flag.TextVar) is known to be valid, and returns an error that says what
// is wrong, for text that does not parse or a Limit that is not valid; l
// is then unchanged.
func (l *Limit) UnmarshalText(text []byte) error {
	if len(text) > maxLimitText {
		return fmt.Errorf("keylimit: a limit's text is at most %d bytes, not %d", maxLimitText, len(text))
	}
	s := strings.TrimSpace(string(text))
	rate, burst, hasBurst := strings.Cut(s, " burst ")
	events, period, ok := strings.Cut(strings.TrimSpace(rate), "/")
	if !ok {
		return fmt.Errorf("keylimit: limit %q: want events/period, such as 100/min or 10/s burst 20", s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(events))
	if err != nil {
		return fmt.Errorf("keylimit: limit %q: events %q is not a whole number", s, strings.TrimSpace(events))
	}
	period, zone, hasZone := strings.Cut(strings.TrimSpace(period), " in ")
	var parsed Limit
	if c, ok := parseCalendar(strings.TrimSpace(period), hasZone); ok {
		parsed = PerCalendar(n, c, nil)
		if hasZone {
			loc, err := loadZone(strings.TrimSpace(zone))
			if err != nil {
				return fmt.Errorf("keylimit: limit %q: zone %q is not in the tz database", s, strings.TrimSpace(zone))
			}
			if loc != time.UTC {
				parsed.Location = loc // nil is UTC
			}
		}
	} else if hasZone {
		return fmt.Errorf("keylimit: limit %q: a zone is for a period of the calendar: hour, day, week or month", s)
	} else {
		d, err := parsePeriod(strings.TrimSpace(period))
		if err != nil {
			return fmt.Errorf("keylimit: limit %q: %w", s, err)
		}
		parsed = Per(n, d)
	}
	if hasBurst {
		b, err := strconv.Atoi(strings.TrimSpace(burst))
		if err != nil {
			return fmt.Errorf("keylimit: limit %q: burst %q is not a whole number", s, strings.TrimSpace(burst))
		}
		parsed = parsed.WithBurst(b)
	}
	validate := parsed.Validate
	if parsed.Calendar != 0 {
		validate = parsed.validateWindow
	}
	if err := validate(); err != nil {
		return fmt.Errorf("%w (in %q)", err, s)
	}
	*l = parsed
	return nil
}

// parseCalendar reads a period of the calendar: week or month, and with a
// zone, hour or day (or their short names) too.
func parseCalendar(s string, zoned bool) (Calendar, bool) {
	switch s {
	case "week":
		return Weekly, true
	case "month":
		return Monthly, true
	}
	if zoned {
		switch s {
		case "h", "hr", "hour":
			return Hourly, true
		case "d", "day":
			return Daily, true
		}
	}
	return 0, false
}

// parsePeriod reads a Period: a unit's name, or a Go duration.
func parsePeriod(s string) (time.Duration, error) {
	for _, u := range periodUnits {
		if s == u.name || slices.Contains(u.alias, s) {
			return u.d, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("period %q is neither a unit (ms, s, min, h, d) nor a duration such as 90s", s)
	}
	return d, nil
}
