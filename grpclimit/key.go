package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/keylimit/keylimit/httplimit"
	"google.golang.org/grpc/metadata"
)

// KeyFunc names the client a call counts against, from the call's context
// (its peer, its incoming metadata, values an authentication interceptor put
// there) and its full method name ("/grpc.health.v1.Health/Check").
//
// A KeyFunc that cannot key a call returns an error, never a key shared by
// every such call: the interceptor then refuses the call without counting it
// (see Config.Error). Wrap ErrNoKey when the call lacks what the key needs,
// so that the client is told (InvalidArgument); any other error, and an
// empty key without one, is the server's (Internal).
type KeyFunc func(ctx context.Context, method string) (string, error)

// ErrNoKey is wrapped by the errors of KeyFuncs for calls that do not carry
// what their key needs: a missing metadata key, a forwarded address that
// cannot be read. By default they are answered InvalidArgument, with the
// error's text. Errors that wrap httplimit.ErrNoKey are answered the same.
var ErrNoKey = errors.New("grpclimit: the call carries no key")

// Method keys calls by their full method name, "/package.Service/Method":
// every call to one method shares its limit, whoever makes it. Join it with
// a client key for a limit per client and method.
func Method(_ context.Context, method string) (string, error) { return method, nil }

// Metadata returns a KeyFunc that keys calls by the first value of the
// incoming metadata key name, such as "x-api-key" (metadata keys are
// lower-case; name is lower-cased). A call without it, or with an empty
// value, has no key (ErrNoKey).
//
// Metadata is whatever the client sends: key by a value only when it is
// checked (an API key your server knows, a user an authenticating proxy
// set), or every new value buys a client a fresh quota.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	missing := fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", missing
	}
}

// Join returns a KeyFunc whose key combines the keys of all the given
// KeyFuncs: Join(ClientIP{}.Key, Method) counts each client on each method
// apart. It is httplimit.Join: the keys joined by '|', each with '|' and '\'
// escaped, so that distinct combinations never make one key; a call that one
// of them cannot key has that one's error.
//
// Join panics if keys is empty or holds a nil, a programming error.
func Join(keys ...KeyFunc) KeyFunc {
	parts := make([]httplimit.KeyFunc, len(keys))
	for i, k := range keys {
		if k == nil {
			panic(fmt.Sprintf("grpclimit: Join: KeyFunc %d is nil", i))
		}
		parts[i] = fromHTTP(k)
	}
	joined := httplimit.Join(parts...) // panics if keys is empty
	return func(ctx context.Context, method string) (string, error) {
		return joined(callRequest(ctx, method, &url.URL{Path: method}))
	}
}

// fromHTTP returns k as an httplimit.KeyFunc of the requests callRequest
// makes.
func fromHTTP(k KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) (string, error) { return k(r.Context(), r.Pattern) }
}

// callRequest is a gRPC call as httplimit sees it: what it is on the wire,
// an HTTP/2 POST to the full method name (u, whose Path is method), with
// the call's context. Pattern holds the method too, so that httplimit.Route
// keys by it. It has no Header and no RemoteAddr: ClientIP makes its own
// request with those.
func callRequest(ctx context.Context, method string, u *url.URL) *http.Request {
	r := &http.Request{
		Method: http.MethodPost, URL: u, Pattern: method,
		Proto: "HTTP/2.0", ProtoMajor: 2,
	}
	return r.WithContext(ctx)
}
