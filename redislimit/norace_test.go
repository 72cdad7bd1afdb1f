//go:build !race

package redislimit_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
