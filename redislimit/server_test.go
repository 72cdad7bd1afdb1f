package redislimit_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests run against real redis-server processes, started here on
// 127.0.0.1 on free ports and stopped when the tests end. There is no
// skipping: without redis-server the tests fail and say how to install it.

// installHint is printed when redis-server is missing.
const installHint = `redislimit: the tests need redis-server on PATH, and it is not there.
Install it, then run the tests again:
    apt-get install -y redis-server     (Debian, Ubuntu; as root)
    brew install redis                  (macOS)
.ci/run installs it by itself on a CI machine.`

// shared is the server most tests use; each test uses keys of its own.
var shared *server

// redisAddr is the address of the server the examples use (shared's); in
// your code, your server's, such as "localhost:6379".
var redisAddr string

// deadAddr is an address where no Redis listens, for the examples of
// failures.
var deadAddr string

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, installHint)
		os.Exit(1)
	}
	s, err := startServer(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, redisAddr = s, s.addr
	port, err := freePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	deadAddr = "127.0.0.1:" + strconv.Itoa(port)
	// The tests kill servers on purpose; the client's log of the failed
	// reconnections would only bury the test output.
	redis.SetLogger(quietLogger{})
	code := m.Run()
	s.stop()
	os.Exit(code)
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// server is one redis-server process.
type server struct {
	port int
	addr string
	cmd  *exec.Cmd
	dir  string
	// stats is the client commandStats reads with, made on first use.
	stats *redis.Client
}

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts redis-server on 127.0.0.1:port (a free port if 0),
// with no persistence, and waits until it answers PING.
func startServer(port int) (*server, error) {
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("redislimit test: no free port: %w", err)
		}
		port = p
	}
	dir, err := os.MkdirTemp("", "redislimit-test-")
	if err != nil {
		return nil, err
	}
	s := &server{port: port, addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *server) start() error {
	s.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	var out strings.Builder
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redislimit test: starting redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
	}
	s.kill()
	return fmt.Errorf("redislimit test: redis-server on %s did not answer PING within 10s; its output:\n%s", s.addr, out.String())
}

// kill stops the server at once (SIGKILL), as a crash would.
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// stop kills the server and removes its directory.
func (s *server) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

// newServer starts a server of the test's own, stopped when the test ends.
func newServer(t testing.TB) *server {
	t.Helper()
	s, err := startServer(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// client returns a client of s as the limiters need one (context deadlines
// honoured), closed when the test ends.
func (s *server) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// commandStats returns the calls of each command the server has run, from
// INFO commandstats, by name ("evalsha", "get", ...). It counts the commands
// scripts run as well as those clients send. INFO itself is left out.
func (s *server) commandStats(t testing.TB) map[string]int64 {
	t.Helper()
	if s.stats == nil {
		// One connection, made once: a new one would add its handshake
		// (HELLO, CLIENT SETINFO) to the counts.
		s.stats = redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 1})
		t.Cleanup(func() { s.stats.Close(); s.stats = nil })
	}
	info, err := s.stats.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_evalsha:calls=12,usec=345,...
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: cannot read %q: %v", line, err)
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return stats
}

// commands returns how many commands the server has run in all, those run
// by scripts included.
func (s *server) commands(t testing.TB) int64 {
	t.Helper()
	var total int64
	for _, n := range s.commandStats(t) {
		total += n
	}
	return total
}

// inScripts are the commands the limiters' scripts run inside Redis.
var inScripts = map[string]bool{"time": true, "get": true, "set": true, "del": true, "hmget": true, "hset": true,
	"pexpire": true, "llen": true, "lindex": true, "ltrim": true, "rpush": true}

// sentSince returns the commands clients sent since commandStats returned
// before, by name: the differences in the counts, less the commands that
// scripts run inside Redis.
func (s *server) sentSince(t testing.TB, before map[string]int64) map[string]int64 {
	t.Helper()
	sent := map[string]int64{}
	for name, n := range s.commandStats(t) {
		if d := n - before[name]; d != 0 && !inScripts[name] {
			sent[name] = d
		}
	}
	return sent
}
