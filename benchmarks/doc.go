// Package benchmarks runs keylimit side by side with the Go rate limiters
// people use today, behind one small interface (Limiter), so that every
// contender pays the same dynamic dispatch and is asked the same questions:
//
//   - speed: BenchmarkAllow, BenchmarkAllowRefused and
//     BenchmarkAllowRefusedRefilling, the rows of the one hot-path harness
//     (internal/hotpath), with the floor in the same run:
//     BenchmarkAllow/<contender>/keys=<n>/<serial|parallel>;
//   - exactness: Contend, the count one hot key admits when many goroutines
//     ask at once, against the bound the limit allows (TestHotKeyContention);
//   - memory: HeapPerKey and HeapPerKeyOnceIdle, the heap each contender
//     keeps per key, and what is left once the keys go idle (BenchmarkMemory);
//   - Redis: BenchmarkRedis, redislimit beside github.com/go-redis/redis_rate
//     on a redis-server the benchmark starts; BenchmarkRedisCPU, the server's
//     time per decision (issue 38's figure), with BenchmarkRedisCPUCounting
//     at a limit where redis_rate counts and BenchmarkRedisCPUFloor beside
//     the least a take that records itself can run;
//   - concurrency limits: BenchmarkAcquireRelease, keylimit's Concurrency
//     beside golang.org/x/sync/semaphore per key and a buffered channel per
//     key (Semaphore, SemaphoreContenders);
//   - HTTP end to end: cmd/e2e, a command (it takes minutes), serves a
//     hello-world handler on one core, bare and behind httplimit,
//     github.com/go-chi/httprate and ulule/limiter, under wrk on another,
//     and prints the ratios to bare;
//   - overload (issue 40): cmd/overload, a command (about two minutes),
//     loads a server of known capacity, whose capacity halves midway, at
//     1.5 times it from four tenants, behind no limit, static concurrency
//     limits twice too high and twice too low, and keylimit's adaptive.Limiter
//     (AIMD and Gradient) through httplimit; it prints each one's goodput,
//     latency, recovery, fairness between tenants and critical success,
//     judges issue 40's targets (PASS or FAIL), measures
//     httplimit.Transport's adaptive throttling against a failing partner,
//     and draws testdata/overload.svg.
//
// It is its own module so that no library module of keylimit depends on the
// limiters it is compared with. report.sh runs all of it, has benchstat
// (golang.org/x/perf, a tool of this module) do the statistics, and writes
// ../BENCHMARKS.md, with http.sh's section: cmd/e2e's table beside
// httplimit's BenchmarkMiddleware and grpclimit's BenchmarkInterceptor.
// NOTES.md says how to read it.
package benchmarks
