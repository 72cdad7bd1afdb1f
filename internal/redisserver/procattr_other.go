//go:build !linux

package redisserver

import "syscall"

// dieWithParent is nil where the kernel cannot kill a child with its
// parent: a server outlives a test binary killed before its cleanup.
func dieWithParent() *syscall.SysProcAttr { return nil }
