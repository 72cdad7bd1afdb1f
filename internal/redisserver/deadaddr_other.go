//go:build !unix

package redisserver

import "strconv"

// DeadAddr returns an address on 127.0.0.1 where no server listens. Here,
// without the unix sockets API, its port is FreePort's, not held: a server
// started later may take it. release does nothing.
func DeadAddr() (addr string, release func(), err error) {
	port, err := FreePort()
	if err != nil {
		return "", nil, err
	}
	return "127.0.0.1:" + strconv.Itoa(port), func() {}, nil
}
