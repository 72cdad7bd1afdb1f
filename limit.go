package keylimit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// maxSpan bounds every span a limiter stores (Burst × interval, a window's
// Period): 2^60 ns, about 36 years. With times clamped to the horizon (see
// clock.go), a timestamp plus two spans stays below 2^62 and never overflows.
const maxSpan = time.Duration(1 << 60)

// InfDuration is the RetryAfter of a request that can never pass, because it
// asks for more events than the limit admits at once.
const InfDuration = time.Duration(math.MaxInt64)

// ErrExceedsLimit is wrapped by errors for requests that can never be admitted
// because n is larger than the most a limiter admits at once (Burst for a
// bucket, Events for a window). Waiting would never help.
var ErrExceedsLimit = errors.New("keylimit: n exceeds the limit")

// Limit is a rate: Events per Period, and for a TokenBucket, how many of them
// may come at once (Burst).
//
// The zero Limit is invalid; constructors report it as an error.
type Limit struct {
	Events int           // events admitted per Period; at least 1
	Period time.Duration // at least 1 ns
	Burst  int           // TokenBucket only: most events admitted at once; 0 means Events

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

// Interval is the time one event's token takes to refill: Period / Events,
// rounded up to a whole nanosecond, so that a bucket never refills faster than
// the limit says. The rounding costs less than 1 ns per token (PerSecond(3)
// refills one token every 333,333,334 ns). It is 0 for an invalid Limit.
func (l Limit) Interval() time.Duration {
	if l.Events < 1 || l.Period < 1 {
		return 0
	}
	ev := time.Duration(l.Events)
	return (l.Period + ev - 1) / ev
}

// String describes l, e.g. "10/1m0s" or "10/1s burst 20".
func (l Limit) String() string {
	if b := l.BurstSize(); b != l.Events {
		return fmt.Sprintf("%d/%v burst %d", l.Events, l.Period, b)
	}
	return fmt.Sprintf("%d/%v", l.Events, l.Period)
}

// Validate reports what is wrong with l for a token bucket, or nil.
// Constructors call it; it is exported for callers that build limits from
// configuration and want to check them early.
func (l Limit) Validate() error {
	if err := l.validateWindow(); err != nil {
		return err
	}
	if l.Events > int(l.Period) {
		return fmt.Errorf("keylimit: %d events per %v is more than one per nanosecond", l.Events, l.Period)
	}
	if time.Duration(l.BurstSize()) > maxSpan/l.Interval() {
		return fmt.Errorf("keylimit: burst %d at one event per %v spans more than %v", l.BurstSize(), l.Interval(), maxSpan)
	}
	return nil
}

// validateWindow checks what a window limiter needs: Events and Period.
func (l Limit) validateWindow() error {
	if l.Events < 1 {
		return fmt.Errorf("keylimit: events %d is below 1", l.Events)
	}
	if l.Period <= 0 {
		return fmt.Errorf("keylimit: period %v is not positive", l.Period)
	}
	if l.Period > maxSpan {
		return fmt.Errorf("keylimit: period %v is longer than %v", l.Period, maxSpan)
	}
	if l.Burst < 0 || (l.burstSet && l.Burst < 1) {
		return fmt.Errorf("keylimit: burst %d is below 1", l.Burst)
	}
	return nil
}
