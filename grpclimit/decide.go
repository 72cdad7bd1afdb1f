package grpclimit

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/metadata"
)

// A call is decided by httplimit's middleware, so that a gRPC client meets
// the very policies, binding-policy choice and fields an HTTP client does:
// the call is presented to it as the request it is on the wire (an HTTP/2
// POST to the full method name, callRequest), and the middleware answers on
// a verdict, which records the outcome instead of writing a response. The
// middleware's Deny and Error say which outcome it was; its handler, admit,
// that the call may go on. The fields it set become response metadata.
//
// The call's context is the request's: the limiters are asked under it as
// far as the middleware passes it on.

// outcome is what the middleware decided for a call.
type outcome uint8

const (
	admitted outcome = iota // the handler runs: admitted, skipped, or a dry run
	refused                 // Deny ran: the decision refused the call
	failed                  // Error ran: the call could not be decided
)

// verdict is the http.ResponseWriter the middleware answers one call on.
// The middleware never wraps it (httplimit.New promises so), so Deny, Error
// and admit find it by a type assertion.
type verdict struct {
	header   http.Header // the fields the middleware set
	url      url.URL     // the request's URL, allocated with the verdict
	outcome  outcome
	decision Decision // when refused
	err      error    // when failed
}

func (v *verdict) Header() http.Header {
	if v.header == nil {
		v.header = make(http.Header, 3)
	}
	return v.header
}

// Write and WriteHeader take what a custom answer would write: nothing is
// sent but the metadata and the status of the call.
func (v *verdict) Write(b []byte) (int, error) { return len(b), nil }
func (v *verdict) WriteHeader(int)             {}

// admit is the handler behind the middleware: reached, the call goes on.
func admit(w http.ResponseWriter, _ *http.Request) { w.(*verdict).outcome = admitted }

// deny is the middleware's Deny.
func deny(w http.ResponseWriter, _ *http.Request, d Decision) {
	v := w.(*verdict)
	v.outcome, v.decision = refused, d
}

// fail is the middleware's Error.
func fail(w http.ResponseWriter, _ *http.Request, err error) {
	v := w.(*verdict)
	v.outcome, v.err = failed, err
}

// decide decides the call to method under ctx.
func (s *Server) decide(ctx context.Context, method string) *verdict {
	v := &verdict{url: url.URL{Path: method}}
	s.limit.ServeHTTP(v, callRequest(ctx, method, &v.url))
	return v
}

// metadata returns the fields the middleware set as response metadata,
// under lower-case keys, or nil if it set none (a skipped call, an error).
// Cache-Control is HTTP's alone and is left out.
func (v *verdict) metadata() metadata.MD {
	if len(v.header) == 0 {
		return nil
	}
	md := make(metadata.MD, len(v.header))
	for k, vals := range v.header {
		switch k {
		case "Ratelimit": // the canonical forms the middleware writes
			md["ratelimit"] = vals
		case "Ratelimit-Policy":
			md["ratelimit-policy"] = vals
		case "Retry-After":
			md["retry-after"] = vals
		case "Cache-Control":
		default:
			md[strings.ToLower(k)] = vals
		}
	}
	return md
}
