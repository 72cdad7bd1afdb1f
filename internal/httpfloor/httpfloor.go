// Package httpfloor is the floor the HTTP benchmarks measure a middleware
// against, httplimit's BenchmarkMiddleware and the benchmarks module's
// cmd/e2e alike: no limiter, only what a middleware that sends a RateLimit
// field of its own for each request must do.
package httpfloor

import (
	"io"
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
		vals[0] = string(append(strconv.AppendInt(append(buf[:0], `"second";r=`...), int64(len(r.RemoteAddr)), 10), ";t=1"...))
		vals[1] = `"second";q=100;w=1`
		h := w.Header()
		h["Ratelimit"], h["Ratelimit-Policy"] = vals[0:1:1], vals[1:2:2]
		next.ServeHTTP(w, r)
	})
}

// refusalBody is a refusal's problem body of the size httplimit's default
// Deny writes for one policy (about 230 bytes), fixed.
const refusalBody = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
	`"title":"Quota Exceeded","status":429,"detail":"rate limit exceeded",` +
	`"violated-policies":["hour"],"retry_after_seconds":3600,"policy":"hour","limit":1,"remaining":0}` + "\n"

// Refusal is the least a refusal that tells its client what the draft asks
// costs: the RateLimit value and Retry-After formatted for the request,
// RateLimit-Policy, Cache-Control: no-store and Content-Type, their values in
// one array no other response shares, the status 429, and a problem body
// (here a constant one). It decides nothing.
func Refusal() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [48]byte
		vals := new([5]string)
		field := strconv.AppendInt(append(buf[:0], `"hour";r=0;t=`...), int64(len(r.RemoteAddr)), 10)
		n := len(field)
		all := string(strconv.AppendInt(field, int64(len(r.RemoteAddr)), 10))
		vals[0], vals[1], vals[2] = all[:n], `"hour";q=1;w=3600`, all[n:]
		vals[3], vals[4] = "no-store", "application/problem+json"
		h := w.Header()
		h["Ratelimit"], h["Ratelimit-Policy"], h["Retry-After"] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
		h["Cache-Control"], h["Content-Type"] = vals[3:4:4], vals[4:5:5]
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, refusalBody)
	})
}
