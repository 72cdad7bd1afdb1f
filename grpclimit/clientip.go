package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/keylimit/keylimit/internal/bounded"
	"github.com/keylimit/keylimit/internal/forwarded"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ClientIP keys calls by the IP address of the client that made them, by
// the rules of httplimit.ClientIP, whose fields it has (TrustedProxies,
// Header, IPv6Prefix), so that one converts to the other. Its zero value
// trusts no proxy and groups IPv6 clients by /64:
//
//	Key: grpclimit.ClientIP{}.Key,
//
// The client is the connection's peer, unless the peer is one of
// TrustedProxies: then it is the rightmost address of the metadata key that
// Header names, lower-cased ("x-forwarded-for" by default, or "forwarded"
// for RFC 7239 elements), that is not a trusted proxy. Each value of the key
// counts as one line of the HTTP field. The peer must have an IP address (a
// TCP connection); over a Unix socket or bufconn it has none, and Key fails
// with an error that is not quota.ErrNoKey (Internal). IPv6 clients are keyed as
// httplimit.ClientIP keys them: by prefix, but by the IPv4 address an
// address embeds (NAT64, Teredo, 6to4, ::a.b.c.d), and a link-local one by
// the whole address and its zone.
type ClientIP struct {
	// TrustedProxies are the networks of the proxies in front of the
	// server whose forwarded metadata is believed. None by default. List
	// only proxies that append the address they received from to Header.
	TrustedProxies []netip.Prefix
	// Header names the metadata the trusted proxies append the client's
	// address to: "X-Forwarded-For" if empty (the metadata key
	// "x-forwarded-for"); "Forwarded" for RFC 7239 elements, whose for=
	// parameters are read; or any other that holds a comma-separated list
	// of addresses. It is case-insensitive.
	Header string
	// IPv6Prefix is the length in bits of the prefix IPv6 clients are keyed
	// by: 0 means 64; 128 keys each address alone. Outside 0 to 128 every
	// call fails with an error (Internal).
	IPv6Prefix int
}

// Key is a KeyFunc: the client's address (see Addr), "192.0.2.1", or for
// IPv6 the prefix it belongs to ("2001:db8:1:2::/64"), or the address itself
// when IPv6Prefix is 128; an embedded IPv4 address, or a link-local address
// with its zone, as ClientIP says. A forwarded address that cannot be read is an
// error that wraps quota.ErrNoKey.
func (c ClientIP) Key(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", errNoPeer
	}
	if !forwarded.ValidPrefix(c.IPv6Prefix) {
		return "", fmt.Errorf("grpclimit: ClientIP.IPv6Prefix %d is not between 1 and 128", c.IPv6Prefix)
	}
	a, err := c.addr(ctx, p.Addr)
	if err != nil {
		return "", err
	}
	return forwarded.Key(a, c.IPv6Prefix), nil
}

// Addr returns the address of the client that made the call whose server
// context ctx is, before any grouping by prefix: useful for logs.
func (c ClientIP) Addr(ctx context.Context) (netip.Addr, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, errNoPeer
	}
	return c.addr(ctx, p.Addr)
}

// addr is Addr of the call whose peer's address is p.
func (c ClientIP) addr(ctx context.Context, p net.Addr) (netip.Addr, error) {
	from, ok := peerAddr(p)
	if !ok {
		return netip.Addr{}, fmt.Errorf("grpclimit: cannot tell the client's address: RemoteAddr %s is not an IP address and port", bounded.Quote(p.String()))
	}
	if !forwarded.Trusted(from, c.TrustedProxies) {
		return from, nil
	}
	// name is the metadata key as an HTTP field's name, as errors say it.
	key, name := "x-forwarded-for", "X-Forwarded-For"
	if c.Header != "" {
		key, name = strings.ToLower(c.Header), textproto.CanonicalMIMEHeaderKey(c.Header)
	}
	a, err := forwarded.Client(from, metadata.ValueFromIncomingContext(ctx, key), name, name == "Forwarded", c.TrustedProxies)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoKey, err)
	}
	return a, nil
}

// peerAddr returns the IP address of a peer: of a TCP connection's without
// formatting it, else read from its text.
func peerAddr(a net.Addr) (netip.Addr, bool) {
	if tcp, ok := a.(*net.TCPAddr); ok {
		if ap := tcp.AddrPort(); ap.Addr().IsValid() {
			return forwarded.Normalize(ap.Addr()), true
		}
	}
	return forwarded.Peer(a.String())
}

// errNoPeer is the error of ClientIP for a context that is not a server
// call's.
var errNoPeer = errors.New("grpclimit: the context has no peer: ClientIP keys the calls of a server")
