package redislimit_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuShare is a reading of where the machine's CPU time has gone, for
// BenchmarkLeasedFleet to tell a fleet the machine starved (other processes
// took the CPUs) from one that spent its CPU on calls that admitted little:
// the machine's busy time (from /proc/stat, all CPUs), this process's
// (getrusage) and the Redis server's (INFO cpu), at a time. Where a source
// cannot be read its figure stays 0.
type cpuShare struct {
	at          time.Time
	machine     time.Duration
	self, redis time.Duration
}

// userHz is the unit of /proc/stat's counts (USER_HZ, 100 on Linux).
const userHz = 100

// readCPU reads the machine's, this process's and c's server's CPU time now.
func readCPU(c *redis.Client) cpuShare {
	s := cpuShare{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		// cpu user nice system idle iowait irq softirq steal ...
		for i, f := range strings.Fields(line)[1:] {
			if v, err := strconv.ParseInt(f, 10, 64); err == nil && i != 3 && i != 4 {
				s.machine += time.Duration(v) * time.Second / userHz
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if info, err := c.Info(context.Background(), "cpu").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				sec, _ := strconv.ParseFloat(v, 64)
				s.redis += time.Duration(sec * float64(time.Second))
			}
		}
	}
	return s
}

// cores is the CPU used between a and b, in cores (CPU seconds a second):
// by this process, by the Redis server, and by everything else on the
// machine.
type cores struct{ self, redis, others float64 }

func coresBetween(a, b cpuShare) cores {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return cores{}
	}
	self, red := (b.self-a.self).Seconds()/wall, (b.redis-a.redis).Seconds()/wall
	return cores{self: self, redis: red, others: max((b.machine-a.machine).Seconds()/wall-self-red, 0)}
}

func (c cores) String() string {
	return fmt.Sprintf("cores: fleet %.2f, redis %.2f, others %.2f", c.self, c.redis, c.others)
}
