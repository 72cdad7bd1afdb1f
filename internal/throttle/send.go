package throttle

import "github.com/keylimit/keylimit"

// Rejected is the error of a send Counts.Admit rejected: it says with what
// probability and why, after Prefix ("httplimit: "), and matches Sentinel
// (the adapter's ErrThrottled) with errors.Is.
type Rejected struct {
	Prefix   string
	Sentinel error
	Decision
}

func (e *Rejected) Error() string { return e.Prefix + "throttled locally, " + e.Decision.String() }

func (e *Rejected) Is(target error) bool { return target == e.Sentinel }

// Ticket is what one send holds while it is out: its slot of the adapter's
// Concurrency (the zero Permit if none), and whether Counts waits for its
// outcome (Record).
type Ticket struct {
	Slot    keylimit.Permit
	Counted bool
}

// Release gives slot back: by Drop if drop is set, so that a
// adaptive.Limiter hears that the partner refused or failed and lowers its
// limit; else by Release.
func Release(slot keylimit.Permit, drop bool) {
	if drop {
		slot.Drop()
		return
	}
	slot.Release()
}
