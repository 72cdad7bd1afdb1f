package redisserver

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestAppendOnly: a server StartAppendOnly started keeps a key across Kill
// and Restart (fsynced at every write here), and says appendonly yes; one
// Start started forgets it.
func TestAppendOnly(t *testing.T) {
	for _, persisted := range []bool{false, true} {
		s, err := Start(0)
		if persisted {
			s, err = StartAppendOnly(0, "--appendfsync", "always")
		}
		require.NoError(t, err)
		defer s.Stop()
		want := map[bool]string{false: "no", true: "yes"}[persisted]
		got, err := configValue(s.Addr, "appendonly")
		require.NoError(t, err)
		require.Equal(t, want, got, "appendonly")
		_, err = command(s.Addr, "SET", "k", "v")
		require.NoError(t, err)
		s.Kill()
		require.NoError(t, s.Restart())
		v, err := command(s.Addr, "EXISTS", "k")
		require.NoError(t, err)
		require.Equal(t, map[bool]string{false: "0", true: "1"}[persisted], v, "the key after Kill and Restart, appendonly %s", want)
	}
}

// configValue returns the value of one parameter from CONFIG GET at addr:
// the second element of its reply.
func configValue(addr, name string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(conn, "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(name), name)
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "*2\r\n" {
		return "", fmt.Errorf("CONFIG GET %s: %q, %v", name, line, err)
	}
	if _, err := readReply(r); err != nil {
		return "", err
	}
	return readReply(r)
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

// TestCluster starts a cluster of 3 masters and a replica of the first,
// checks that it serves every slot, fails the first master over to its
// replica, and checks the roles are swapped.
func TestCluster(t *testing.T) {
	start := time.Now()
	c, err := StartCluster(3, 1)
	require.NoError(t, err)
	defer c.Stop()
	t.Logf("a cluster of 3 masters and a replica started in %v", time.Since(start))
	require.Len(t, c.Addrs(), 3)
	for _, s := range append(c.Masters, c.Replicas...) {
		info, err := command(s.Addr, "CLUSTER", "INFO")
		require.NoError(t, err)
		require.Contains(t, info, "cluster_slots_ok:16384", s.Addr)
	}
	old := c.Masters[0]
	start = time.Now()
	require.NoError(t, c.Failover(0))
	t.Logf("failed over in %v", time.Since(start))
	require.Equal(t, old, c.Replicas[0], "the old master")
	role, err := command(old.Addr, "ROLE")
	require.NoError(t, err)
	require.Equal(t, "slave", role, "the old master's role")
	_, err = StartCluster(2, 0)
	require.ErrorContains(t, err, "want 3 or more masters")
}

// TestReadReply reads each kind of reply, and refuses what is not one.
func TestReadReply(t *testing.T) {
	for in, want := range map[string]string{
		"+OK\r\n": "OK", ":12\r\n": "12", "$5\r\nhello\r\n": "hello", "*2\r\n$6\r\nmaster\r\n:3\r\n": "master",
	} {
		got, err := readReply(bufio.NewReader(strings.NewReader(in)))
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
	for in, want := range map[string]string{
		"-ERR no\r\n": "redisserver: ERR no", "$99999999\r\n": "a bulk reply of length", "*0\r\n": "an array reply",
		"\r\n": "an empty reply", "?\r\n": "a reply",
	} {
		_, err := readReply(bufio.NewReader(strings.NewReader(in)))
		require.ErrorContains(t, err, want, "%q", in)
	}
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

// TestVersionIsTheBinarys: the server Start started says it is what its
// command says it is, and is named for the command: a run with
// KEYLIMIT_REDIS_SERVER=valkey-server is on Valkey, not on a redis-server
// that took its place.
func TestVersionIsTheBinarys(t *testing.T) {
	s, err := Start(0)
	require.NoError(t, err)
	defer s.Stop()
	got, err := s.Version()
	require.NoError(t, err)
	want, err := BinaryVersion()
	require.NoError(t, err)
	require.Equal(t, want, got, "INFO server beside %s --version", Binary())
	name, _, _ := strings.Cut(got, " ")
	require.Equal(t, strings.TrimSuffix(filepath.Base(Binary()), "-server"), name, "the server's name, for the command %s", Binary())
	t.Logf("%s is %s", Binary(), got)
}

// TestVersionReadsServerName reads a Valkey's INFO server, whose
// redis_version is that of the Redis it is compatible with, and a Redis's,
// which has no server_name, from a listener that answers as each would.
func TestVersionReadsServerName(t *testing.T) {
	for info, want := range map[string]string{
		"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nredis_git_sha1:00000000\r\n": "valkey 8.0.1",
		"# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n":                                              "redis 7.0.15",
		"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n":                                                    "",
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "$%d\r\n%s\r\n", len(info), info)
		}()
		got, err := (&Server{Addr: ln.Addr().String()}).Version()
		if want == "" {
			require.ErrorContains(t, err, "INFO server has no valkey_version", "%q", info)
			continue
		}
		require.NoError(t, err, "%q", info)
		require.Equal(t, want, got, "%q", info)
	}
}

// TestCliBinary: the client command is the server command's, -server
// replaced by -cli, in the same directory; a server command not named so
// is an error, not a guess.
func TestCliBinary(t *testing.T) {
	for server, want := range map[string]string{
		"": "redis-cli", "redis-server": "redis-cli", "valkey-server": "valkey-cli",
		"/opt/valkey/bin/valkey-server": "/opt/valkey/bin/valkey-cli",
	} {
		t.Setenv(serverEnv, server)
		got, err := cliBinary()
		require.NoError(t, err, "%q", server)
		require.Equal(t, want, got, "the -cli of %q", server)
	}
	t.Setenv(serverEnv, "keydb")
	_, err := cliBinary()
	require.ErrorContains(t, err, `the server command "keydb" does not end in -server`)
}

// TestDeadAddr: a dial of DeadAddr's address is refused, and nothing can
// listen on it while it is held, as a server started meanwhile would try
// to; once released, the port is free again.
func TestDeadAddr(t *testing.T) {
	addr, release, err := DeadAddr()
	require.NoError(t, err)
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "a dial of the dead address")
	_, err = net.Listen("tcp", addr)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "a listener on the dead address while it is held")
	for range 100 {
		port, err := FreePort()
		require.NoError(t, err)
		require.NotEqual(t, addr, "127.0.0.1:"+strconv.Itoa(port), "FreePort handed out the held port")
	}
	release()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "a listener on the port once released")
	ln.Close()
}

// TestFreePortNeverTwice: FreePort returns a port once in a process, so
// that a port a killed server will be restarted on goes to no other.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		port, err := FreePort()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d returned twice", port)
		seen[port] = true
	}
}
