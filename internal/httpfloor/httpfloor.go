// Package httpfloor is the floor the HTTP benchmarks measure a middleware
// against, httplimit's BenchmarkMiddleware and the benchmarks module's
// cmd/e2e alike: no limiter, only what a middleware that sends a RateLimit
// field of its own for each request must do.
package httpfloor

import (
	"net/http"
	"strconv"
)

// TwoFields wraps next in the least a middleware that sends a RateLimit
// value formatted for each request, and RateLimit-Policy, does before the
// handler: one string, and an array for the two values, which no other
// response may share. With the table of a fresh header map, which the
// first field allocates, that is 3 allocations; like any middleware that
// touches the header, it makes net/http copy the map before writing it.
func TwoFields(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [32]byte
		vals := new([2]string)
		vals[0] = string(strconv.AppendInt(append(buf[:0], `"second";r=`...), int64(len(r.RemoteAddr)), 10))
		vals[1] = `"second";q=1000000000;w=1`
		h := w.Header()
		h["Ratelimit"], h["Ratelimit-Policy"] = vals[0:1:1], vals[1:2:2]
		next.ServeHTTP(w, r)
	})
}
