package grpclimit

// SetRand makes c's Throttle draw its random numbers from r, for tests
// that decide on known numbers. It exists only in the package's tests.
func SetRand(c *Client, r func() float64) { c.rand = r }
