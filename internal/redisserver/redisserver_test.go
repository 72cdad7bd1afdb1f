package redisserver

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartKillRestartStop runs a server through its life: it answers PING
// once started, not after Kill, again after Restart on the same port.
func TestStartKillRestartStop(t *testing.T) {
	require.True(t, Installed(), "the test needs redis-server, and "+InstallHint)
	s, err := Start(0)
	require.NoError(t, err)
	defer s.Stop()
	require.NoError(t, ping(s.Addr), "PING once started")

	s.Kill()
	require.Nil(t, s.Process(), "the process after Kill")
	require.Error(t, ping(s.Addr), "PING after Kill")

	require.NoError(t, s.Restart())
	require.NoError(t, ping(s.Addr), "PING after Restart")
}

// TestPingRefusesAnotherReply checks that a listener that answers anything
// but +PONG is not taken for a Redis server.
func TestPingRefusesAnotherReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n"))
	}()
	require.ErrorContains(t, ping(ln.Addr().String()), `PING answered "HTTP/1.1 400 Bad Request\r\n"`)
}
