package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"

	"github.com/keylimit/keylimit/internal/joinkey"
	"github.com/keylimit/keylimit/internal/nokey"
)

// KeyFunc names the client a request counts against: its IP address
// (ClientIP), an API key or user header (Header), its route (Route), a
// combination (Join), or anything a function of the request can tell, such
// as a user ID an authentication middleware put in the request's context.
//
// A KeyFunc that cannot key a request returns an error, never a key shared
// by every such request: the middleware then answers without calling the
// handler (see Config.Error). Wrap quota.ErrNoKey when the request lacks what the
// key needs, so that the client is told (400); any other error, and an
// empty key without one, is the server's (500).
type KeyFunc func(r *http.Request) (string, error)

// errNoKey is wrapped by the package's KeyFuncs' errors for requests that
// do not carry what their key needs: quota.ErrNoKey's kind, in our words.
var errNoKey = nokey.New("httplimit: the request carries no key")

// Header returns a KeyFunc that keys requests by the value of the header
// name, such as "X-API-Key". A request without the header, or with an empty
// value, has no key (quota.ErrNoKey).
//
// A header is whatever the client sends: key by one only when it is checked
// (an API key your server knows, a user ID an authenticating proxy set), or
// every new value buys a client a fresh quota.
func Header(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	missing := fmt.Errorf("%w: no %s header", errNoKey, name)
	return func(r *http.Request) (string, error) {
		if vs := r.Header[name]; len(vs) > 0 && vs[0] != "" { // Get, without canonicalizing name again
			return vs[0], nil
		}
		return "", missing
	}
}

// errEmptyKey is the error for a KeyFunc that returned an empty key and no
// error: counting every such request against one key "" would make them
// all one client.
var errEmptyKey = errors.New("httplimit: the KeyFunc returned an empty key without an error")

// errNoPattern is the error of Route for a request not routed by a
// ServeMux.
var errNoPattern = errors.New("httplimit: the request has no route pattern (Request.Pattern): wrap the handlers registered on the http.ServeMux, not the ServeMux itself")

// Route keys requests by the http.ServeMux pattern that matched them,
// Request.Pattern, such as "GET /items/{id}": every request to one route
// shares its limit, whatever its path values. Combine it with a client key
// (Join) for a limit per client and route.
//
// The ServeMux sets Pattern before it calls the handler it found, so the
// middleware must wrap that handler, not the mux:
//
//	mux.Handle("GET /items/{id}", limit(items))
//
// A request without a pattern is a configuration error: Route returns an
// error that is not quota.ErrNoKey, and the middleware answers 500. Other routers
// keep their pattern elsewhere; write a KeyFunc that reads it.
func Route(r *http.Request) (string, error) {
	if r.Pattern == "" {
		return "", errNoPattern
	}
	return r.Pattern, nil
}

// Join returns a KeyFunc whose key combines the keys of all the given
// KeyFuncs: Join(ClientIP{}.Key, Route) counts each client on each route
// apart. The key is their keys joined by '|', each with '|' and '\'
// escaped by a '\', so that distinct combinations never make one key. A
// request that one of them cannot key has no key, with that one's error;
// one that one of them keys "" is the server's error (500), as the empty
// key of any KeyFunc is.
//
// Join panics if keys is empty or holds a nil, a programming error.
func Join(keys ...KeyFunc) KeyFunc {
	if len(keys) == 0 {
		panic("httplimit: Join needs at least one KeyFunc")
	}
	for i, k := range keys {
		if k == nil {
			panic(fmt.Sprintf("httplimit: Join: KeyFunc %d is nil", i))
		}
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(r *http.Request) (string, error) {
		return joinkey.Join(keys, func(k KeyFunc) (string, error) { return k(r) }, errEmptyKey)
	}
}
