//go:build race

package redislimit_test

// raceEnabled reports whether the race detector is on: it makes sync.Pool
// drop a quarter of what is put back, which allocation counts must allow for.
const raceEnabled = true
