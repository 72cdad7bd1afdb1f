package redisserver

import "syscall"

// dieWithParent has a server killed when the process that started it dies,
// however it dies: a test binary killed by go test's -timeout, or by a
// signal, leaves no redis-server behind it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
