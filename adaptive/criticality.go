package adaptive

import "github.com/keylimit/keylimit"

// room is how many slots a request of criticality c may see held, with
// itself, under limit, with ceiling the most ever: Sheddable three quarters
// of limit (at least 1), Default limit, Critical three times limit (the
// hard bound), up to ceiling.
func room(c keylimit.Criticality, limit, ceiling int64) int64 {
	switch c {
	case keylimit.Sheddable:
		return max(limit*3/4, 1)
	case keylimit.Critical:
		return max(min(3*limit, ceiling), limit)
	}
	return limit
}
