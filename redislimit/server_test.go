package redislimit_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

// The tests run against real redis-server processes, started here on
// 127.0.0.1 on free ports and stopped when the tests end. There is no
// skipping: without redis-server the tests fail and say how to install it.

// shared is the server most tests use; each test uses keys of its own.
var shared *server

// redisAddr is the address of the server the examples use (shared's); in
// your code, your server's, such as "localhost:6379".
var redisAddr string

// deadAddr is an address where no Redis listens, for the examples of
// failures.
var deadAddr string

func TestMain(m *testing.M) {
	if !redisserver.Installed() {
		fmt.Fprintln(os.Stderr, "redislimit: the tests need redis-server, and", redisserver.InstallHint)
		fmt.Fprintln(os.Stderr, ".ci/run installs it by itself on a CI machine; so does .ci/test when run as root.")
		os.Exit(1)
	}
	s, err := startServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, redisAddr = s, s.Addr
	port, err := redisserver.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	deadAddr = "127.0.0.1:" + strconv.Itoa(port)
	// The tests kill servers on purpose; the client's log of the failed
	// reconnections would only bury the test output.
	redis.SetLogger(quietLogger{})
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// server is a redis-server process, with what the tests read of it.
type server struct {
	*redisserver.Server
	// stats is the client commandStats reads with, made on first use.
	stats *redis.Client
}

func startServer() (*server, error) {
	s, err := redisserver.Start(0)
	if err != nil {
		return nil, err
	}
	return &server{Server: s}, nil
}

// newServer starts a server of the test's own, stopped when the test ends.
func newServer(t testing.TB) *server {
	t.Helper()
	s, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// client returns a client of s as the limiters need one (context deadlines
// honoured), closed when the test ends.
func (s *server) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
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
		s.stats = redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1})
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
