//go:build !unix

package hotpath

// cpuTime is 0: the process's CPU time is read on unix systems only.
func cpuTime() int64 { return 0 }
