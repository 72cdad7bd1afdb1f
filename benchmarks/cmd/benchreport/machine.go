package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// machine is what the figures were measured on.
type machine struct {
	cpu, cores, memory, clock, kernel, goVersion, commit string
}

func describeMachine() machine {
	return machine{
		cpu:       firstField("/proc/cpuinfo", "model name"),
		cores:     strings.TrimSpace(run("nproc")),
		memory:    memTotal(),
		clock:     readTrimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
		kernel:    readTrimmed("/proc/sys/kernel/osrelease"),
		goVersion: strings.TrimSpace(run("go", "version")),
		commit:    commit(),
	}
}

// firstField returns the value of the first "name : value" line of path.
func firstField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// memTotal returns the machine's memory in GiB.
func memTotal() string {
	var kb float64
	if _, err := fmt.Sscanf(firstField("/proc/meminfo", "MemTotal"), "%g kB", &kb); err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// run returns a command's standard output, or "unknown".
func run(name string, args ...string) string {
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return string(b)
}

// commit names the commit measured, and says if the tree had changes.
func commit() string {
	c := strings.TrimSpace(run("git", "rev-parse", "--short", "HEAD"))
	if strings.TrimSpace(run("git", "status", "--porcelain", "--untracked-files=no")) != "" {
		c += " with uncommitted changes"
	}
	return c
}
