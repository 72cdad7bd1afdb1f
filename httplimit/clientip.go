package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"

	"github.com/keylimit/keylimit/internal/bounded"
	"github.com/keylimit/keylimit/internal/forwarded"
)

// ClientIP keys requests by the IP address of the client that sent them.
// Its zero value trusts no proxy and groups IPv6 clients by /64:
//
//	Key: httplimit.ClientIP{}.Key,
//
// The client is the connection's peer (Request.RemoteAddr), unless the peer
// is one of TrustedProxies: then it is the rightmost address of the
// forwarding header that is not a trusted proxy. The leftmost, which the
// client may have written, is never believed. If every address is a trusted
// proxy (or there is none), the leftmost of them (or the peer) is the
// client. An entry that is not an address where the client's should be
// ("unknown", an obfuscated node, a malformed value) is an error that wraps
// quota.ErrNoKey, answered 400 by default. IPv6 clients are keyed by their prefix
// of IPv6Prefix bits, but for addresses that stand for another client than
// a prefix does: one that embeds the client's IPv4 address (IPv4-mapped,
// NAT64's 64:ff9b::/96, IPv4-compatible ::a.b.c.d, IPv4-translated,
// Teredo, 6to4) is keyed by that IPv4 address; a link-local one by the
// whole address and its zone ("fe80::1%eth0"), which no other link shares;
// and one of ::/64 (::1) or of the local-use NAT64 prefix 64:ff9b:1::/48 by
// the whole address. Other zones are dropped. A NAT64 of an operator's own
// prefix cannot be told from native IPv6: set IPv6Prefix to 128 behind one.
type ClientIP struct {
	// TrustedProxies are the networks of the reverse proxies and load
	// balancers in front of the server, whose forwarding header is
	// believed: netip.MustParsePrefix("10.0.0.0/8"). None by default. List
	// only proxies that append the address they received from to Header: a
	// trusted proxy that passes the header on untouched lets its clients
	// choose their key.
	TrustedProxies []netip.Prefix
	// Header is the field the trusted proxies append the client's address
	// to: "X-Forwarded-For" if empty; "Forwarded" for the RFC 7239 field,
	// whose for= parameters are read; or any other field that holds a
	// comma-separated list of addresses, as X-Forwarded-For does.
	Header string
	// IPv6Prefix is the length in bits of the prefix IPv6 clients are keyed
	// by: 0 means 64, the block one subscriber usually holds, so that a
	// client cannot escape its limit by rotating addresses within it; 128
	// keys each address alone. Outside 0 to 128 every request fails with an
	// error (500).
	IPv6Prefix int
}

// Key is a KeyFunc: it returns the client's address (see Addr) as a
// string: "192.0.2.1" for IPv4, the prefix it belongs to for IPv6
// ("2001:db8:1:2::/64"), or the IPv6 address itself when IPv6Prefix is 128;
// an IPv6 address that embeds an IPv4 client's is that IPv4 address, and a
// link-local one is itself with its zone (see ClientIP).
func (c ClientIP) Key(r *http.Request) (string, error) {
	if !forwarded.ValidPrefix(c.IPv6Prefix) {
		return "", fmt.Errorf("httplimit: ClientIP.IPv6Prefix %d is not between 1 and 128", c.IPv6Prefix)
	}
	// Most peers: IPv4, and no proxy in front to believe, read once.
	if a, host, ok := forwarded.PeerIPv4(r.RemoteAddr); ok && (len(c.TrustedProxies) == 0 || !forwarded.Trusted(a, c.TrustedProxies)) {
		return host, nil
	}
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	return forwarded.KeyIn(a, c.IPv6Prefix, r.RemoteAddr), nil
}

// Addr returns the address of the client that sent r, found as ClientIP
// describes, before any grouping by prefix: useful for logs.
func (c ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, ok := forwarded.Peer(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("httplimit: cannot tell the client's address: RemoteAddr %s is not an IP address and port", bounded.Quote(r.RemoteAddr))
	}
	if !forwarded.Trusted(peer, c.TrustedProxies) {
		return peer, nil
	}
	name := fieldXForwardedFor
	if c.Header != "" {
		name = textproto.CanonicalMIMEHeaderKey(c.Header)
	}
	a, err := forwarded.Client(peer, r.Header[name], name, name == fieldForwarded, c.TrustedProxies)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", errNoKey, err)
	}
	return a, nil
}

const (
	fieldXForwardedFor = "X-Forwarded-For"
	fieldForwarded     = "Forwarded"
)
