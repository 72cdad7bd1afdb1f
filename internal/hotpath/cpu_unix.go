//go:build unix

package hotpath

import "syscall"

// cpuTime is the CPU time the process has had, user and system, in ns, or 0
// if the system does not say. On a machine other programs load, a row's
// wall-clock ns/op counts the time its threads waited for a CPU; its CPU
// time a call does not, and ratios of it stay put where ns/op's scatter.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
