//go:build !race

package keylimit_test

// raceEnabled reports a -race build, whose tests scale some sizes down.
const raceEnabled = false
