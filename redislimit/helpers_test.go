package redislimit_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/redisserver"
	"github.com/keylimit/keylimit/limitertest"
	kquota "github.com/keylimit/keylimit/quota"
	"github.com/keylimit/keylimit/redislimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The helpers of the package's tests. Assertions: testify's require; only
// the test's goroutine asserts, other goroutines count or collect and the
// test asserts afterwards.

// ---- Redis servers ----

// The tests run against real redis-server processes, started here on
// 127.0.0.1 on free ports and stopped when the tests end. There is no
// skipping: without redis-server the tests fail and say how to install it.
// KEYLIMIT_REDIS_SERVER=valkey-server runs them on Valkey instead
// (internal/redisserver); TestMain prints which server they run on.

// shared is the server most tests use; each test uses keys of its own. It
// keeps its data on disk (an append-only file), as a production Redis
// must: Ping passes on it.
var shared *server

// redisAddr is the address of the server the examples use (shared's); in
// your code, your server's, such as "localhost:6379".
var redisAddr string

// deadAddr is an address where no Redis listens, for the examples of
// failures.
var deadAddr string

func TestMain(m *testing.M) {
	if os.Getenv(concHelperEnv) != "" {
		os.Exit(concurrencyHelper()) // a helper process of TestConcurrencyKilledInstance
	}
	if !redisserver.Installed() {
		fmt.Fprintf(os.Stderr, "redislimit: the tests need %s, and %s\n", redisserver.Binary(), redisserver.InstallHint)
		fmt.Fprintln(os.Stderr, ".ci/run installs it by itself on a CI machine; so does .ci/test when run as root.")
		os.Exit(1)
	}
	// Held until the tests end, and taken before any server starts: a port
	// only free when chosen could be taken by a server started since (the
	// Cluster's, in the background), and a test of a dead Redis would then
	// reach a live one.
	addr, release, err := redisserver.DeadAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	deadAddr = addr
	ss, err := redisserver.StartAppendOnly(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := &server{Server: ss}
	shared, redisAddr = s, s.Addr
	// Which server the tests run on ($KEYLIMIT_REDIS_SERVER chooses), said
	// once, and checked: a run asked for on Valkey must not pass on another.
	version, err := ss.Version()
	if err == nil {
		var want string
		if want, err = redisserver.BinaryVersion(); err == nil && want != version {
			err = fmt.Errorf("redislimit: %s says it is %s, but the server it started says %s", redisserver.Binary(), want, version)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		s.Stop()
		os.Exit(1)
	}
	flag.Parse()
	if flag.Lookup("test.list").Value.String() == "" {
		fmt.Printf("redislimit: the tests run on %s (%s)\n", version, redisserver.Binary())
	}
	if runsCluster() {
		go startCluster() // in the background, while the other tests run
	} else {
		clusterErr = errors.New("the Redis Cluster was not started: -run selects none of clusterTests")
		close(clusterReady)
	}
	// The tests kill servers on purpose; the client's log of the failed
	// reconnections would only bury the test output.
	redis.SetLogger(quietLogger{})
	// Every limiter logs at construction what its failure policy admits;
	// the tests that read the logs give a logger of their own.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	code := m.Run()
	s.Stop()
	<-clusterReady
	if cluster != nil {
		cluster.Stop()
	}
	release()
	os.Exit(code)
}

// The Redis Cluster the cluster tests share (cluster_test.go): 3 masters
// and a replica of the first, started by TestMain in the background; ready
// is closed once it runs (or failed to start, clusterErr says why).
var (
	cluster      *redisserver.Cluster
	clusterErr   error
	clusterStart time.Duration // how long it took
	clusterReady = make(chan struct{})
)

// clusterTests are the tests that run on the shared cluster (theCluster).
var clusterTests = []string{"TestCluster", "TestClusterFleetSize", "TestMatrix"}

// runsCluster reports whether -run selects one of clusterTests (and -list
// is not given), so that a run of other tests does not start a cluster (its
// start-up allocates, which the tests that count allocations would see).
func runsCluster() bool {
	if flag.Lookup("test.list").Value.String() != "" {
		return false
	}
	run := flag.Lookup("test.run").Value.String()
	top, _, _ := strings.Cut(run, "/")
	for _, name := range clusterTests {
		if ok, err := regexp.MatchString(top, name); run == "" || ok || err != nil {
			return true
		}
	}
	return false
}

func startCluster() {
	defer close(clusterReady)
	start := time.Now()
	cluster, clusterErr = redisserver.StartCluster(3, 1)
	clusterStart = time.Since(start)
}

// theCluster waits for the shared cluster and returns it.
func theCluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	<-clusterReady
	require.NoError(t, clusterErr, "starting the Redis Cluster")
	return cluster
}

// clusterClient returns a cluster client of c as the limiters need one,
// closed when the test ends.
func clusterClient(t testing.TB, c *redisserver.Cluster) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
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

// newServer starts a server of the test's own, which keeps nothing on disk
// (a Kill and Restart empty it), stopped when the test ends.
func newServer(t testing.TB) *server {
	t.Helper()
	s, err := redisserver.Start(0)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return &server{Server: s}
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
	require.NoError(t, err, "INFO commandstats")
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_evalsha:calls=12,usec=345,...
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || handshake(name) {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(fields, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, "INFO commandstats: %q", line)
		stats[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return stats
}

// handshake reports whether a cmdstat_ name is a command go-redis sends when
// its pool opens a connection (HELLO, CLIENT SETINFO): the pool opens one
// whenever a call finds none idle, e.g. while a lease's background return
// holds the other, so they are go-redis's, not a decision's.
func handshake(name string) bool {
	return name == "cmdstat_hello" || strings.HasPrefix(name, "cmdstat_client|")
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
	"pexpire": true, "setrange": true, "zadd": true, "zcard": true, "zremrangebyscore": true, "llen": true, "lrange": true, "lindex": true, "ltrim": true, "rpush": true, "lrem": true, "append": true,
	"incrby": true, "decrby": true, "pexpireat": true, "pexpiretime": true}

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

// sentBy returns the commands s received while f ran, as sentSince counts
// them.
func (s *server) sentBy(t testing.TB, f func()) map[string]int64 {
	t.Helper()
	before := s.commandStats(t)
	f()
	return s.sentSince(t, before)
}

// ---- Keys, limiters, clients ----

// keySeq makes keys unique within the test binary.
var keySeq atomic.Int64

// testKey returns a key no other test uses, so that tests can share a
// server.
func testKey(t testing.TB, name string) string {
	return fmt.Sprintf("%s/%s/%d", t.Name(), name, keySeq.Add(1))
}

// patient is a timeout for tests that count exactly: a slow round trip on a
// busy machine must not become a failure-policy decision.
const patient = 10 * time.Second

// newFunc is a Redis limiter constructor as the tests use them.
type newFunc func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error)

// types are the three Redis limiters, for the tests that run on each.
// keyLimited gives lim's keys the limits of fn (SetKeyLimit), as a user
// does right after the constructor, and returns lim.
func keyLimited(t testing.TB, lim keylimit.Limiter[string], fn func(key string) keylimit.Limit) keylimit.Limiter[string] {
	t.Helper()
	require.NoError(t, lim.(interface {
		SetKeyLimit(func(key string) keylimit.Limit) error
	}).SetKeyLimit(fn))
	return lim
}

var types = []struct {
	name string
	new  newFunc
}{
	{"TokenBucket", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewTokenBucket(c, "test", l, opts...))
	}},
	{"FixedWindow", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewFixedWindow(c, "test", l, opts...))
	}},
	{"SlidingWindow", func(c redis.UniversalClient, l keylimit.Limit, opts ...redislimit.Option) (keylimit.Limiter[string], error) {
		return nilIfErr(redislimit.NewSlidingWindow(c, "test", l, opts...))
	}},
}

// typeNamed returns the Redis limiter type of that name.
func typeNamed(name string) newFunc {
	for _, typ := range types {
		if typ.name == name {
			return typ.new
		}
	}
	panic("no Redis limiter type " + name)
}

// nilIfErr turns a typed nil pointer into a nil interface, so that the
// suite's "no limiter with an error" check sees what a caller would.
func nilIfErr[L keylimit.Limiter[string]](lim L, err error) (keylimit.Limiter[string], error) {
	if err != nil {
		return nil, err
	}
	return lim, nil
}

// joinedLimiter is what All returns for Redis limiters it joined.
type joinedLimiter interface {
	keylimit.ContextLimiter[string]
	interface {
		TakeEach(context.Context, string, int, []keylimit.Result) (keylimit.Result, error)
	}
	keylimit.ContextLimiter[string]
}

// redisLimiter is what a Redis limiter is to keylimit.All.
type redisLimiter interface {
	keylimit.ContextLimiter[string]
	keylimit.ContextLimiter[string]
}

// errorLog collects what WithOnError reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// list returns the errors reported so far.
func (l *errorLog) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// pinged runs lim's Ping, which leaves the server checked: a test that
// counts the commands Redis ran calls it first, so that the check a first
// successful call would start in the background cannot add a CONFIG GET (or
// the handshake of a connection of its own) to the count. The servers of
// the tests' own (newServer) keep nothing on disk, which Ping reports, and
// nothing else may be wrong.
func pinged(t *testing.T, lim keylimit.Limiter[string]) {
	t.Helper()
	err := lim.(interface{ Ping(context.Context) error }).Ping(context.Background())
	if errors.Is(err, redislimit.ErrNoPersistence) && !errors.Is(err, redislimit.ErrEvictionPolicy) {
		return
	}
	require.NoError(t, err, "Ping")
}

// quickClient is a client that gives up on a dead server at once (no
// retries), so that a test of an outage does not wait out its timeouts.
func quickClient(t *testing.T, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// deadClient returns a client of an address where no Redis listens, which
// gives up at once (no retries), closed when the test ends.
func deadClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: deadAddr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitUntilBack waits until lim reaches Redis again. After a burst of
// failed dials, go-redis's pool stops dialing and probes the server once a
// second, so a restarted server may be unreachable for a second or so.
func waitUntilBack(t *testing.T, lim keylimit.Limiter[string]) {
	t.Helper()
	peek := lim.(interface {
		PeekContext(context.Context, string) (keylimit.Result, error)
	}).PeekContext
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = peek(context.Background(), "probe"); err == nil {
			return
		}
	}
	require.NoError(t, err, "the limiter did not reach the restarted Redis within 10s")
}

// ---- Time ----

// span is when a call was made on this machine's clock, which Redis shares:
// the script read TIME somewhere in [start, end]. Tests on real time check
// what a Result says against spans, so that a slow machine (a sleep that
// oversleeps, a round trip that stalls) cannot make them fail.
type span struct{ start, end time.Time }

// timed runs f and returns when it ran.
func timed(f func()) span {
	start := time.Now()
	f()
	return span{start, time.Now()}
}

// within reports whether d is in [lo, hi], with 1 ms to spare for Redis's
// µs clock and rounding.
func within(d, lo, hi time.Duration) bool {
	return d >= lo-time.Millisecond && d <= hi+time.Millisecond
}

// untilBoundary sleeps until lead before the next multiple of period on the
// Unix clock.
func untilBoundary(period, lead time.Duration) {
	into := time.Duration(time.Now().UnixNano()) % period
	wait := period - into - lead
	if wait < 0 {
		wait += period
	}
	time.Sleep(wait)
}

// redisTime reads the server's clock, in ns since the Unix epoch.
func redisTime(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return now.UnixNano()
}

// skewedClock is the real clock as read on a machine whose wall clock is
// off by offset. Its times carry no monotonic reading, so durations between
// them are wall-clock durations, as on that machine.
type skewedClock struct {
	*clock.Mock // for the methods a limiter does not call here
	offset      time.Duration
}

func (c skewedClock) Now() time.Time { return time.Now().Round(0).Add(c.offset) }

// newMock returns a mock clock at the start of 2025 (UTC), a time on every
// boundary the tests use (a minute, an hour), for the limiters' local time
// and, with WithScriptClock, the scripts' time.
func newMock() *clock.Mock {
	mock := clock.NewMock()
	mock.Set(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	return mock
}

// ---- Tests run on one server and on the cluster ----

// runSuite runs the behaviour suite on limiters that newLim makes on c, on a
// clock of the test's (see TestBehaviour, behaviour_test.go), with opts.
func runSuite(t *testing.T, c redis.UniversalClient, newLim newFunc, opts ...redislimit.Option) {
	mock := newMock()
	limitertest.Run(t, limitertest.Harness{
		New: func(t *testing.T, l keylimit.Limit) (keylimit.Limiter[string], error) {
			return newLim(c, l, append(opts, redislimit.WithTimeout(patient),
				keylimit.WithClock(mock), redislimit.WithScriptClock(mock))...)
		},
		Advance:  mock.Add,
		Attempts: 2_000,
	})
}

// fleetAdmitsTheLimit is TestFleetAdmitsTheGlobalLimit (fleet_test.go), each
// instance on a client newClient makes: for each type, with the deny cache
// and without.
func fleetAdmitsTheLimit(t *testing.T, newClient func(testing.TB) redis.UniversalClient) {
	const quota, instances, goroutines, attempts = 50, 3, 8, 40
	for _, typ := range types {
		for _, cache := range []int{redislimit.DefaultDenyCacheSize, 0} {
			t.Run(fmt.Sprintf("%s/denycache=%d", typ.name, cache), func(t *testing.T) {
				key := testKey(t, "hot")
				var fleet []keylimit.Limiter[string]
				for range instances {
					lim, err := typ.new(newClient(t), keylimit.PerHour(quota),
						redislimit.WithTimeout(patient), redislimit.WithDenyCacheSize(cache))
					require.NoError(t, err)
					fleet = append(fleet, lim)
				}
				var admitted [instances]atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, lim := range fleet {
					for range goroutines {
						wg.Go(func() {
							<-start
							for range attempts {
								if lim.Allow(key) {
									admitted[i].Add(1)
								}
							}
						})
					}
				}
				close(start)
				wg.Wait()
				total := admitted[0].Load() + admitted[1].Load() + admitted[2].Load()
				require.EqualValues(t, quota, total, "the fleet admitted (%d, %d, %d by instance) of %d attempts",
					admitted[0].Load(), admitted[1].Load(), admitted[2].Load(), instances*goroutines*attempts)
				for i, lim := range fleet {
					r := lim.Peek(key)
					require.False(t, r.Allowed, "instance %d: Peek after the quota: %v", i, r)
					require.Zero(t, r.Remaining, "instance %d: Peek after the quota", i)
				}
			})
		}
	}
}

// ---- Comparing with the in-memory limiters ----

// sideBySide makes the requests (n; 0 means Peek) on both limiters and
// compares the Results. A request that can never pass is answered by the
// Redis limiter without a round trip, so only its decision and RetryAfter
// (InfDuration) are compared.
func sideBySide(t *testing.T, rlim, mlim keylimit.Limiter[string], requests []int) {
	t.Helper()
	key := testKey(t, "k")
	const slack = time.Second // far less than any interval the limits have
	for i, n := range requests {
		var got, want keylimit.Result
		if n == 0 {
			got, want = rlim.Peek(key), mlim.Peek(key)
		} else {
			got, want = rlim.Take(key, n), mlim.Take(key, n)
		}
		impossible := n < 0 || n > want.Limit
		require.True(t, got.Allowed == want.Allowed && got.Limit == want.Limit && near(got.RetryAfter, want.RetryAfter, slack) &&
			(impossible || got.Remaining == want.Remaining && near(got.ResetAfter, want.ResetAfter, slack)),
			"step %d, n=%d: Redis %+v, memory %+v", i, n, got, want)
	}
}

func near(a, b, slack time.Duration) bool {
	if a == keylimit.InfDuration || b == keylimit.InfDuration {
		return a == b
	}
	return a-b <= slack && b-a <= slack
}

// stateKey is the Redis key of key's state in lim: its prefix, then the
// key, as the hash tag.
func stateKey(lim keylimit.Limiter[string], key string) string {
	return lim.(interface{ StateKey(string) string }).StateKey(key)
}

// fmtType is the dynamic type of v, as %T prints it.
func fmtType(v any) string { return fmt.Sprintf("%T", v) }

// ---- Logs and faults ----

// logRecorder is a slog.Handler that keeps the lines logged at its level or
// above, for the tests of what the limiters log. It is safe for concurrent
// use, and never calls t: a limiter may log from a goroutine of its own.
type logRecorder struct {
	level slog.Level
	mu    sync.Mutex
	lines []logLine
}

// logLine is one line logged: its level, message and attributes (as text).
type logLine struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// newLogRecorder returns a recorder of the lines at level or above, and a
// logger that writes to it.
func newLogRecorder(level slog.Level) (*logRecorder, *slog.Logger) {
	h := &logRecorder{level: level}
	return h, slog.New(h)
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := logLine{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		line.Attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, line)
	return nil
}

// The limiters log with neither attributes nor groups of their own.
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { panic("WithAttrs is not used") }
func (h *logRecorder) WithGroup(string) slog.Handler      { panic("WithGroup is not used") }

// logged returns the lines logged so far whose message contains msg.
func (h *logRecorder) logged(msg string) []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []logLine
	for _, l := range h.lines {
		if strings.Contains(l.Msg, msg) {
			lines = append(lines, l)
		}
	}
	return lines
}

// waitLogged waits up to 10 s for a line whose message contains msg (the
// check of the eviction policy logs from a goroutine of its own) and
// returns the lines that do.
func (h *logRecorder) waitLogged(t *testing.T, msg string) []logLine {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if lines := h.logged(msg); len(lines) > 0 {
			return lines
		}
	}
	require.FailNow(t, "nothing logged", "no line containing %q within 10s", msg)
	return nil
}

// faults is a client hook that fails every command while on, as a network
// failure would, without stopping the server.
type faults struct{ on atomic.Bool }

// errInjected is the error of a command faults failed.
var errInjected = errors.New("injected: connection reset by peer")

// addFaults adds a faults hook to c and returns it, off.
func addFaults(c *redis.Client) *faults {
	f := new(faults)
	c.AddHook(f)
	return f
}

func (f *faults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (f *faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// chargeReported is a Policy.Charge that charges the cost the handler
// reported, or the whole cost if it reported none.
func chargeReported(o kquota.Outcome) int {
	if o.Reported < 0 {
		return o.Cost
	}
	return o.Reported
}

// admittedPerKey has goroutines goroutines each call lim.Allow each times,
// all at once, goroutine g's i-th call on keys[(g+i) % len(keys)], and
// returns how many were admitted on each key.
func admittedPerKey(lim keylimit.Limiter[string], keys []string, goroutines, each int) []int64 {
	admitted := make([]atomic.Int64, len(keys))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				k := (g + i) % len(keys)
				if lim.Allow(keys[k]) {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	counts := make([]int64, len(keys))
	for k := range admitted {
		counts[k] = admitted[k].Load()
	}
	return counts
}
