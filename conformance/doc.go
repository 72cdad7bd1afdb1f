// Package conformance checks keylimit's rate-limit fields with a parser
// that is not keylimit's: github.com/dunglas/httpsfv, an independent
// implementation of RFC 9651 (Structured Field Values). Its tests send
// requests and calls through httplimit's middleware and grpclimit's
// interceptors, under every kind of limiter, and parse every RateLimit,
// RateLimit-Policy and Retry-After value they get; and they hold the
// RateLimit reader that httplimit.Transport and grpclimit.Client decide
// their pauses by (internal/ratefields) to httpsfv's reading of any field,
// by differential fuzzing.
//
// It is a module of its own, never published (tools/release/unpublished.txt),
// so that no published module depends on httpsfv.
package conformance
