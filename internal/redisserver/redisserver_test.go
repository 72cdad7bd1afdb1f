package redisserver

import (
	"bufio"
	"fmt"
	"net"
	"strings"
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

// TestStartWithFlags passes flags to redis-server, again on Restart, and
// refuses the flags that would move it off 127.0.0.1 or onto disk.
func TestStartWithFlags(t *testing.T) {
	s, err := Start(0, "--maxmemory-policy", "allkeys-lru", "--maxmemory", "4mb")
	require.NoError(t, err)
	defer s.Stop()
	require.Equal(t, "allkeys-lru", configGet(t, s.Addr, "maxmemory-policy"), "maxmemory-policy once started")
	s.Kill()
	require.NoError(t, s.Restart())
	require.Equal(t, "allkeys-lru", configGet(t, s.Addr, "maxmemory-policy"), "maxmemory-policy after Restart")

	for _, f := range []string{"--bind", "--save", "--appendonly", "--dir", "--port"} {
		_, err := Start(0, f, "x")
		require.ErrorContains(t, err, "redisserver: the flag "+f+" is the package's own", f)
	}
}

// configGet reads one setting with CONFIG GET, in RESP by hand: the reply
// is an array of the name and the value, "*2\r\n$N\r\nname\r\n$M\r\nvalue\r\n".
func configGet(t *testing.T, addr, name string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "CONFIG GET %s\r\n", name)
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	var lines []string
	for range 5 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		lines = append(lines, strings.TrimSuffix(line, "\r\n"))
	}
	require.Equal(t, []string{"*2", fmt.Sprintf("$%d", len(name)), name}, lines[:3], "CONFIG GET's reply")
	return lines[4]
}
