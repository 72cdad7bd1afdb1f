// Package redisserver starts and stops redis-server processes on 127.0.0.1,
// for the tests, demos and benchmarks of every module of keylimit (the
// internal path lets any module under github.com/keylimit/keylimit import
// it). A server listens on a free port (or one given), keeps nothing on
// disk (unless StartAppendOnly started it, in its own directory), and is
// stopped by Stop. It uses the standard library only, so that
// the root module needs no Redis client.
package redisserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// InstallHint says how to install redis-server, for when it is missing.
const InstallHint = `redis-server is not on PATH. Install it:
    apt-get install -y redis-server     (Debian, Ubuntu; as root)
    brew install redis                  (macOS)`

// ErrMissing is returned by Start when redis-server is not on PATH.
var ErrMissing = errors.New("redisserver: " + InstallHint)

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

// Installed reports whether redis-server is on PATH.
func Installed() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// FreePort asks the kernel for a free port on 127.0.0.1.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisserver: no free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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
	s.cmd = exec.Command("redis-server", append(args, s.flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = dieWithParent()
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redisserver: starting redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ping(s.Addr) == nil {
			return nil
		}
	}
	s.Kill()
	return fmt.Errorf("redisserver: redis-server on %s did not answer PING within 10s; its output:\n%s", s.Addr, s.out.String())
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
