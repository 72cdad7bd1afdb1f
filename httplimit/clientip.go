package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
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
// ErrNoKey, answered 400 by default. IPv6 clients are keyed by their prefix
// of IPv6Prefix bits; IPv4-mapped addresses count as IPv4, zones are dropped.
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
// ("2001:db8:1:2::/64"), or the IPv6 address itself when IPv6Prefix is 128.
func (c ClientIP) Key(r *http.Request) (string, error) {
	bits := c.IPv6Prefix
	if bits == 0 {
		bits = 64
	}
	if bits < 0 || bits > 128 {
		return "", fmt.Errorf("httplimit: ClientIP.IPv6Prefix %d is not between 1 and 128", c.IPv6Prefix)
	}
	a, err := c.Addr(r)
	if err != nil {
		return "", err
	}
	if a.Is4() || bits == 128 {
		return a.String(), nil
	}
	return netip.PrefixFrom(a, bits).Masked().String(), nil
}

// Addr returns the address of the client that sent r, found as ClientIP
// describes, before any grouping by prefix: useful for logs.
func (c ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, err := parsePeer(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, err
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	name, forwarded := fieldXForwardedFor, false
	if c.Header != "" {
		name = textproto.CanonicalMIMEHeaderKey(c.Header)
		forwarded = name == fieldForwarded
	}
	lines := r.Header[name]
	// Each trusted proxy appends the address it received the request from,
	// so reading from the right, past our own proxies, gives the first
	// address no one we trust could have made up; a client that talks to
	// the server directly can forge any header without changing its key.
	// Lines are read from the last: a proxy may add its own line rather
	// than append to the last one; either way the order is kept.
	leftmost := peer
	for i := len(lines) - 1; i >= 0; i-- {
		var client, first netip.Addr
		var found bool
		if forwarded {
			client, first, found, err = c.scanForwarded(lines[i])
		} else {
			client, first, found, err = c.scanList(name, lines[i])
		}
		if err != nil || found {
			return client, err
		}
		if first.IsValid() {
			leftmost = first
		}
	}
	return leftmost, nil
}

const (
	fieldXForwardedFor = "X-Forwarded-For"
	fieldForwarded     = "Forwarded"
)

// trusted reports whether a is one of the trusted proxies.
func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// scanList reads one line of an X-Forwarded-For-like field from the right.
// It returns the first address that is not a trusted proxy (found), or the
// error for an entry there that is not an address; if every entry is a
// trusted proxy, the leftmost of them.
func (c ClientIP) scanList(name, line string) (client, first netip.Addr, found bool, err error) {
	for rest := line; ; {
		comma := strings.LastIndexByte(rest, ',')
		entry := strings.Trim(rest[comma+1:], " \t") // OWS (RFC 9110, 5.6.3)
		if entry != "" {                             // an empty list element is no hop (RFC 9110, 5.6.1)
			a, ok := parseNode(entry)
			if !ok {
				return a, a, false, fmt.Errorf("%w: cannot tell the client's address: %s entry %s is not an IP address", ErrNoKey, name, quote(entry))
			}
			if !c.trusted(a) {
				return a, a, true, nil
			}
			first = a
		}
		if comma < 0 {
			return first, first, false, nil
		}
		rest = rest[:comma]
	}
}

// scanForwarded reads one line of an RFC 7239 Forwarded field and answers
// as scanList does. Quoted strings may hold commas, so the line is parsed
// from the left, keeping the last element whose node is not a trusted
// proxy; a line that is not well-formed is an error, since whatever a
// client wrote could then swallow what our proxy appended.
func (c ClientIP) scanForwarded(line string) (client, first netip.Addr, found bool, err error) {
	var last string // the node of the last element not from a trusted proxy
	for s, i := line, 0; i < len(s); i++ {
		node, empty, next, ok := forwardedElement(s, i)
		if !ok {
			return client, first, false, fmt.Errorf("%w: cannot tell the client's address: the Forwarded field %s is not well-formed", ErrNoKey, quote(line))
		}
		i = next
		if empty {
			continue
		}
		if a, ok := parseNode(node); ok && c.trusted(a) {
			if !first.IsValid() {
				first = a
			}
			continue
		}
		last, found = node, true
	}
	if !found {
		return first, first, false, nil
	}
	if a, ok := parseNode(last); ok {
		return a, first, true, nil
	}
	if last == "" {
		return client, first, false, fmt.Errorf("%w: cannot tell the client's address: a Forwarded element has no for=", ErrNoKey)
	}
	return client, first, false, fmt.Errorf("%w: cannot tell the client's address: Forwarded names it %s, not an IP address", ErrNoKey, quote(last))
}

// forwardedElement parses the forwarded-element of s that starts at i,
// up to the ',' that ends it (or the end), and returns the value of its
// for= parameter, unquoted, or "" if it has none; empty if the element has
// no parameter at all (an empty list element, no hop). next is the index
// of the ',' or len(s).
func forwardedElement(s string, i int) (node string, empty bool, next int, ok bool) {
	pairs := 0
	for {
		i = skipOWS(s, i)
		if i < len(s) && s[i] != ';' && s[i] != ',' {
			start := i
			for i < len(s) && isTchar(s[i]) {
				i++
			}
			name := s[start:i]
			if name == "" || i == len(s) || s[i] != '=' {
				return "", false, i, false
			}
			i++
			var value string
			if i < len(s) && s[i] == '"' {
				start = i + 1
				if i, ok = skipQuoted(s, i); !ok {
					return "", false, i, false
				}
				value = s[start : i-1]
			} else {
				start = i
				for i < len(s) && isTchar(s[i]) {
					i++
				}
				value = s[start:i]
			}
			if value == "" {
				return "", false, i, false
			}
			if strings.EqualFold(name, "for") {
				if node != "" {
					return "", false, i, false // two for= in one element
				}
				node = value
			}
			pairs++
			i = skipOWS(s, i)
		}
		if i == len(s) || s[i] == ',' {
			return node, pairs == 0, i, true
		}
		if s[i] != ';' {
			return "", false, i, false
		}
		i++
	}
}

// skipQuoted returns the index after the quoted-string that starts at s[i]
// == '"', or false if it does not end.
func skipQuoted(s string, i int) (int, bool) {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return i, false
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseNode reads a node of a forwarding header: an IP address, with or
// without a port, IPv6 in brackets or not ("192.0.2.1", "192.0.2.1:4711",
// "2001:db8::1", "[2001:db8::1]:4711"). The address is returned unmapped
// and without zone. Anything else ("unknown", "_hidden") is not a node.
func parseNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = s[1:end], s[end+1:]
	} else if colon := strings.IndexByte(s, ':'); colon >= 0 {
		host, port = s[:colon], s[colon:]
	} else {
		return netip.Addr{}, false
	}
	if port != "" && !validPort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return normalize(a), true
}

// validPort reports whether p is ":" and an RFC 7239 node-port: up to 5
// digits, or an obfuscated port ("_" and letters, digits, '.', '_', '-').
func validPort(p string) bool {
	if len(p) < 2 || p[0] != ':' {
		return false
	}
	p = p[1:]
	obfuscated := p[0] == '_'
	if obfuscated {
		p = p[1:]
	}
	if p == "" || !obfuscated && len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		digit := '0' <= c && c <= '9'
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !digit && !(obfuscated && (letter || c == '.' || c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// parsePeer reads Request.RemoteAddr, which net/http sets to "IP:port".
func parsePeer(remote string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return normalize(ap.Addr()), nil
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return normalize(a), nil
	}
	return netip.Addr{}, fmt.Errorf("httplimit: cannot tell the client's address: RemoteAddr %s is not an IP address and port", quote(remote))
}

func normalize(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }
