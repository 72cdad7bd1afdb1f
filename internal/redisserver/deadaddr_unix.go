//go:build unix

package redisserver

import (
	"fmt"
	"strconv"
	"syscall"
)

// DeadAddr returns an address on 127.0.0.1 where no server listens, nor
// can while it is held: its port is bound by a socket that never listens,
// so a dial there is refused at once, and neither a server started
// meanwhile nor the kernel's choice of a free port (FreePort, Start) can
// take it. A port from FreePort, closed again, could be handed to the next
// server started, and a test of a dead Redis would then reach a live one.
// release frees the port.
func DeadAddr() (addr string, release func(), err error) {
	// Under ForkLock, as the net package makes its sockets: a process
	// started meanwhile does not inherit the socket (and the port).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return "", nil, fmt.Errorf("redisserver: a socket for a dead address: %w", err)
	}
	// No SO_REUSEADDR: a server's bind of the port, which sets it, fails.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("redisserver: binding a dead address: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("redisserver: the port of a dead address: %w", err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return "127.0.0.1:" + strconv.Itoa(port), func() { syscall.Close(fd) }, nil
}
