// Package benchmarks runs keylimit side by side with the Go rate limiters
// people use today, behind one small interface (Limiter), so that every
// contender pays the same dynamic dispatch and is asked the same questions:
//
//   - speed: BenchmarkAllow/<limit>/keys=<n>/<serial|parallel>/<contender>,
//     with the floor (clock read + map lookup + one CAS) in the same run;
//   - exactness: Contend, the count one hot key admits when many goroutines
//     ask at once, against the bound the limit allows;
//   - memory: MeasureMemory, the heap each contender keeps per key, and what
//     is left after the keys go idle.
//
// It is its own module so that the keylimit module never depends on the
// limiters it is compared with. run.sh regenerates ../BENCHMARKS.md from all
// three; cmd/benchreport writes that file.
package benchmarks
