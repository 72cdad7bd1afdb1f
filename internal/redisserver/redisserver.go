// Package redisserver starts and stops redis-server processes on 127.0.0.1,
// for the tests, demos and benchmarks of every module of keylimit (the
// internal path lets any module under github.com/keylimit/keylimit import
// it). A server listens on a free port (or one given), keeps nothing on
// disk (unless StartAppendOnly started it, in its own directory), and is
// stopped by Stop. It uses the standard library only, so that
// the root module needs no Redis client.
//
// The server is redis-server unless the environment variable
// KEYLIMIT_REDIS_SERVER names another command, such as
// valkey-server: everything here then runs that, and the matching -cli
// (valkey-cli) where redis-cli would be run. Version says which server
// answers, so that a run can show what it ran on.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// InstallHint says how to install redis-server, for when it is missing.
const InstallHint = `redis-server (or the command $KEYLIMIT_REDIS_SERVER names) is not on PATH. Install it:
    apt-get install -y redis-server     (Debian, Ubuntu; as root)
    apt-get install -y valkey-server    (Debian trixie, or -t bookworm-backports; then KEYLIMIT_REDIS_SERVER=valkey-server)
    brew install redis                  (macOS)`

// ErrMissing is returned by Start when the server command is not on PATH.
var ErrMissing = errors.New("redisserver: " + InstallHint)

// serverEnv is the environment variable that chooses the server command
// (Binary): a name on PATH or a path, such as valkey-server.
const serverEnv = "KEYLIMIT_REDIS_SERVER"

// Binary returns the server command the package runs: $KEYLIMIT_REDIS_SERVER
// if set, else redis-server.
func Binary() string {
	if b := os.Getenv(serverEnv); b != "" {
		return b
	}
	return "redis-server"
}

// cliBinary returns the client command that comes with Binary, in the same
// directory: redis-cli for redis-server, valkey-cli for valkey-server.
func cliBinary() (string, error) {
	b := Binary()
	cli, ok := strings.CutSuffix(b, "-server")
	if !ok {
		return "", fmt.Errorf("redisserver: the server command %q does not end in -server, so its -cli cannot be named", b)
	}
	return cli + "-cli", nil
}

// Server is one redis-server process.
type Server struct {
	Port  int
	Addr  string   // "127.0.0.1:Port"
	flags []string // the extra flags Start was given, passed again by Restart
	// appendOnly: the server logs its writes to an append-only file in dir,
	// which Restart reads back (StartAppendOnly).
	appendOnly bool
	cmd        *exec.Cmd
	dir        string
	out        strings.Builder // what the process printed
}

// Installed reports whether the server command (Binary) is on PATH.
func Installed() bool {
	_, err := exec.LookPath(Binary())
	return err == nil
}

// handedOut are the ports FreePort has returned in this process: a server
// started on one may be killed and restarted on it later (Restart), and a
// port free again meanwhile must not go to another server.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort asks the kernel for a free port on 127.0.0.1, one it has not
// returned before in this process.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisserver: no free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("redisserver: no free port: the kernel offered only ports returned before, 100 times")
}

// Start starts redis-server on 127.0.0.1:port (a free port if port is 0),
// with no persistence, and waits until it answers PING. flags are passed to
// redis-server after its own, such as "--maxmemory", "4mb"; they cannot
// move it off 127.0.0.1 (--bind) or onto disk (--save, --appendonly, --dir).
func Start(port int, flags ...string) (*Server, error) { return start(port, false, flags) }

// StartAppendOnly is Start, but the server logs every write to an
// append-only file (appendonly yes) in its own directory, as a Redis that
// keeps its data must, and Restart reads it back: after Kill, it has what
// was written up to the last fsync (every second; pass "--appendfsync",
// "always" for every write). Stop removes the file with the directory.
func StartAppendOnly(port int, flags ...string) (*Server, error) { return start(port, true, flags) }

// start is Start, with an append-only file if appendOnly.
func start(port int, appendOnly bool, flags []string) (*Server, error) {
	if !Installed() {
		return nil, ErrMissing
	}
	if port == 0 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		port = p
	}
	for _, f := range flags {
		switch f {
		case "--bind", "--save", "--appendonly", "--dir", "--port":
			return nil, fmt.Errorf("redisserver: the flag %s is the package's own", f)
		}
	}
	dir, err := os.MkdirTemp("", "redisserver-")
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), flags: flags, appendOnly: appendOnly, dir: dir}
	if err := s.Restart(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Restart starts the server again on its port, after Kill, and waits until
// it answers PING. Its data is gone, unless StartAppendOnly started it: then
// it has what its append-only file holds.
func (s *Server) Restart() error {
	s.out.Reset()
	appendOnly := "no"
	if s.appendOnly {
		appendOnly = "yes"
	}
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", appendOnly, "--dir", s.dir}
	s.cmd = exec.Command(Binary(), append(args, s.flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = dieWithParent()
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: starting %s: %w", Binary(), err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ping(s.Addr) == nil {
			return nil
		}
	}
	s.Kill()
	return fmt.Errorf("redisserver: %s on %s did not answer PING within 10s; its output:\n%s", Binary(), s.Addr, s.out.String())
}

// ping sends PING to the server at addr and reads its reply, within 100 ms.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	// The reply is one line; a 64-byte buffer bounds what is read of anything else.
	line, err := bufio.NewReaderSize(conn, 64).ReadSlice('\n')
	if err != nil {
		return err
	}
	if string(line) != "+PONG\r\n" {
		return fmt.Errorf("redisserver: PING answered %q", line)
	}
	return nil
}

// Process is the running redis-server, to signal (SIGSTOP stalls it); nil
// after Kill.
func (s *Server) Process() *os.Process {
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	s.cmd = nil
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// Version returns what the running server says it is, from INFO server:
// its name and version, such as "redis 7.0.15" or "valkey 8.0.1". Valkey
// names itself in server_name (and reports a redis_version of the Redis it
// is compatible with, so that field alone cannot tell them apart); Redis
// has no server_name.
func (s *Server) Version() (string, error) {
	info, err := command(s.Addr, "INFO", "server")
	if err != nil {
		return "", fmt.Errorf("redisserver: INFO server: %w", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	name := fields["server_name"]
	if name == "" {
		name = "redis"
	}
	version := fields[name+"_version"]
	if version == "" {
		return "", fmt.Errorf("redisserver: INFO server has no %s_version", name)
	}
	return name + " " + version, nil
}

// BinaryVersion returns what the server command (Binary) says it is when
// run with --version, in Version's form: "Valkey server v=8.0.1 sha=..."
// is "valkey 8.0.1". A server started here answers Version with the same.
func BinaryVersion() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, Binary(), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("redisserver: %s --version: %w", Binary(), err)
	}
	// "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=..."
	words := strings.Fields(string(out))
	if len(words) < 3 || words[1] != "server" || !strings.HasPrefix(words[2], "v=") {
		return "", fmt.Errorf("redisserver: %s --version printed %.200q", Binary(), out)
	}
	return strings.ToLower(words[0]) + " " + strings.TrimPrefix(words[2], "v="), nil
}
