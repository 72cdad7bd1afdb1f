package grpclimit

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/keylimit/keylimit/httplimit"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ClientIP keys calls by the IP address of the client that made them, by
// the rules of httplimit.ClientIP, whose fields it has (TrustedProxies,
// Header, IPv6Prefix). Its zero value trusts no proxy and groups IPv6
// clients by /64:
//
//	Key: grpclimit.ClientIP{}.Key,
//
// The client is the connection's peer, unless the peer is one of
// TrustedProxies: then it is the rightmost address of the metadata key that
// Header names, lower-cased ("x-forwarded-for" by default, or "forwarded"
// for RFC 7239 elements), that is not a trusted proxy. Each value of the key
// counts as one line of the HTTP field. The peer must have an IP address (a
// TCP connection); over a Unix socket or bufconn it has none, and Key fails
// with an error that is not ErrNoKey (Internal).
type ClientIP httplimit.ClientIP

// Key is a KeyFunc: the client's address as httplimit.ClientIP.Key gives
// it, "192.0.2.1" or an IPv6 prefix ("2001:db8:1:2::/64"). A forwarded
// address that cannot be read is an error that wraps ErrNoKey.
func (c ClientIP) Key(ctx context.Context, _ string) (string, error) {
	r, err := c.request(ctx)
	if err != nil {
		return "", err
	}
	k, err := httplimit.ClientIP(c).Key(r)
	if err != nil {
		return "", keyError{err}
	}
	return k, nil
}

// Addr returns the address of the client that made the call whose server
// context ctx is, before any grouping by prefix: useful for logs.
func (c ClientIP) Addr(ctx context.Context) (netip.Addr, error) {
	r, err := c.request(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := httplimit.ClientIP(c).Addr(r)
	if err != nil {
		return netip.Addr{}, keyError{err}
	}
	return a, nil
}

// errNoPeer is the error of ClientIP for a context that is not a server
// call's.
var errNoPeer = errors.New("grpclimit: the context has no peer: ClientIP keys the calls of a server")

// request is the call as httplimit.ClientIP reads it: RemoteAddr the peer's
// address, and the forwarding header holding the values of the metadata key
// of its name. Only that one header is copied.
func (c ClientIP) request(ctx context.Context) (*http.Request, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil, errNoPeer
	}
	r := &http.Request{RemoteAddr: p.Addr.String()}
	name, key := "X-Forwarded-For", "x-forwarded-for"
	if c.Header != "" {
		name, key = textproto.CanonicalMIMEHeaderKey(c.Header), strings.ToLower(c.Header)
	}
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		r.Header = http.Header{name: v}
	}
	return r, nil
}

// keyError is an error of httplimit's rules, said as grpclimit's. It wraps
// ErrNoKey as well when it wraps httplimit.ErrNoKey.
type keyError struct{ err error }

func (e keyError) Error() string { return "grpclimit: " + e.err.Error() }

func (e keyError) Unwrap() []error {
	if errors.Is(e.err, httplimit.ErrNoKey) {
		return []error{ErrNoKey, e.err}
	}
	return []error{e.err}
}
