// Package forwarded reads the client's address from the forwarding fields
// proxies append to, X-Forwarded-For and the RFC 7239 Forwarded field, as
// httplimit and grpclimit both do (grpclimit from the metadata of those
// names): from the right, past the trusted proxies, so that the address a
// client wrote itself is never believed. It reads what a client sent, in
// time linear in its length, and says what it cannot read.
package forwarded

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/keylimit/keylimit/internal/bounded"
)

// Client returns the address of the client, found in the lines of the
// forwarding field name of a request whose peer, a trusted proxy, is peer:
// the rightmost address that is not one of proxies. If every address is a
// trusted proxy (or there is none), the leftmost of them (or the peer) is
// the client. rfc7239 says the field is Forwarded, whose for= parameters
// are read; otherwise it is a comma-separated list of addresses, as
// X-Forwarded-For is. An entry that is not an address where the client's
// should be ("unknown", an obfuscated node, a malformed value) is an error
// that says so: the request's, whose key then cannot be read.
func Client(peer netip.Addr, lines []string, name string, rfc7239 bool, proxies []netip.Prefix) (netip.Addr, error) {
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
		var err error
		if rfc7239 {
			client, first, found, err = scanForwarded(lines[i], proxies)
		} else {
			client, first, found, err = scanList(name, lines[i], proxies)
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

// Trusted reports whether a (its zone aside) is in one of proxies.
func Trusted(a netip.Addr, proxies []netip.Prefix) bool {
	a = a.WithZone("")
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Peer reads a connection's peer address, "IP:port" or an IP alone, and
// reports false if it is neither.
func Peer(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return Normalize(ap.Addr()), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return Normalize(a), true
	}
	return netip.Addr{}, false
}

// Normalize returns a as the client's address is compared and keyed:
// IPv4-mapped addresses as IPv4, and without a zone unless it is link-local
// (fe80::/10), where the zone tells apart links that may reuse an address.
func Normalize(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.IsLinkLocalUnicast() {
		a = a.WithZone("")
	}
	return a
}

// ValidPrefix reports whether bits can be the IPv6Prefix of a ClientIP: 0
// (the default, 64) to 128.
func ValidPrefix(bits int) bool { return bits >= 0 && bits <= 128 }

// Key returns the key of the client at a: "192.0.2.1" for IPv4, the prefix
// of bits bits (64 if bits is 0) it belongs to for IPv6
// ("2001:db8:1:2::/64"), or the IPv6 address itself when bits is 128. bits
// must be valid (ValidPrefix). Whatever bits says, an IPv6 address that
// embeds a client's IPv4 address (see EmbeddedIPv4) is keyed by that IPv4
// address, a link-local one by the whole address and its zone
// ("fe80::1%eth0"), and the rest of ::/64 (loopback, unassigned) by the
// whole address: a prefix would put every client of a translator, of every
// link or of the reserved block under one key.
func Key(a netip.Addr, bits int) string {
	if bits == 0 {
		bits = 64
	}
	if v4, ok := EmbeddedIPv4(a); ok {
		return v4.String()
	}
	plain := a.WithZone("")
	if a.Is4() || bits == 128 || a.IsLinkLocalUnicast() || reserved64.Contains(plain) || localNAT64.Contains(plain) {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// The IPv6 blocks whose addresses carry an IPv4 address, or are keyed whole.
var (
	// nat64 is the well-known prefix of RFC 6052: 64:ff9b::a.b.c.d, an IPv4
	// host through a translator.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// localNAT64 is RFC 8215's local-use prefix: the IPv4 address's place in
	// it depends on the length the operator chose, so its addresses are
	// keyed whole (one per IPv4 host, as an IPv4 key is).
	localNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
	// compatible and translated are ::a.b.c.d (RFC 4291's deprecated
	// IPv4-compatible addresses) and ::ffff:0:a.b.c.d (RFC 2765's
	// IPv4-translated ones); :: and ::1 are neither.
	compatible = netip.MustParsePrefix("::/96")
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	// reserved64 is the block both lie in, with the loopback address.
	reserved64 = netip.MustParsePrefix("::/64")
	// teredo clients (RFC 4380) have their public IPv4 address in the last
	// 32 bits, inverted; sixToFour sites (RFC 3056) have theirs in bits 16
	// to 47.
	teredo    = netip.MustParsePrefix("2001::/32")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// EmbeddedIPv4 returns the IPv4 address of the client that an IPv6 address
// stands for, if it is one that carries it: IPv4-mapped (::ffff:a.b.c.d),
// NAT64 (64:ff9b::a.b.c.d), IPv4-compatible (::a.b.c.d, but not :: or ::1)
// or IPv4-translated (::ffff:0:a.b.c.d), Teredo (2001::/32: the client's
// public address) or 6to4 (2002:aabb:ccdd::/48: the site's).
func EmbeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap(), true
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	switch {
	case nat64.Contains(a), translated.Contains(a):
		return last, true
	case compatible.Contains(a):
		if a.IsLoopback() || a.IsUnspecified() {
			return netip.Addr{}, false
		}
		return last, true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// PeerIPv4 reads s as Peer does when s is an IPv4 peer's "a.b.c.d:port"
// as net/http writes RemoteAddr, and returns the address and its text, the
// host part of s, which is its key (see KeyIn): in one pass, where Peer and
// KeyIn parse it and format it again. For any other s (IPv6, a zone, a
// leading zero, no port, a port above 65535) it reports false, and Peer
// reads it.
func PeerIPv4(s string) (a netip.Addr, host string, ok bool) {
	var b [4]byte
	i := 0
	for field := range b {
		// 1 to 3 digits, at most 255, without a leading zero (netip refuses
		// one), then '.', or ':' after the last.
		if i >= len(s) || s[i]-'0' > 9 {
			return netip.Addr{}, "", false
		}
		v := uint(s[i] - '0')
		i++
		for n := 0; v != 0 && n < 2 && i < len(s) && s[i]-'0' <= 9; n++ {
			v = v*10 + uint(s[i]-'0')
			i++
		}
		sep := byte('.')
		if field == 3 {
			sep = ':'
		}
		if v > 255 || i >= len(s) || s[i] != sep {
			return netip.Addr{}, "", false
		}
		b[field] = byte(v)
		i++
	}
	// The port, as netip.ParseAddrPort reads it (strconv.ParseUint, base
	// 10, 16 bits): digits, leading zeros allowed.
	port := s[i:]
	if port == "" {
		return netip.Addr{}, "", false
	}
	for n, j := uint(0), 0; j < len(port); j++ {
		d := uint(port[j] - '0')
		if n = n*10 + d; d > 9 || n > 1<<16-1 {
			return netip.Addr{}, "", false
		}
	}
	return netip.AddrFrom4(b), s[:i-1], true
}

// KeyIn is Key(a, bits), as a part of s when s holds it: s is the peer's
// "IP:port" (or IP) that a may have been read from, and the key of an IPv4
// peer is then its host part, which needs no allocation.
func KeyIn(a netip.Addr, bits int, s string) string {
	if a.Is4() {
		host := s
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host = s[:i]
		}
		var buf [len("255.255.255.255")]byte
		if string(a.AppendTo(buf[:0])) == host {
			return host
		}
	}
	return Key(a, bits)
}

// scanList reads one line of an X-Forwarded-For-like field from the right.
// It returns the first address that is not a trusted proxy (found), or the
// error for an entry there that is not an address; if every entry is a
// trusted proxy, the leftmost of them.
func scanList(name, line string, proxies []netip.Prefix) (client, first netip.Addr, found bool, err error) {
	for rest := line; ; {
		comma := strings.LastIndexByte(rest, ',')
		entry := strings.Trim(rest[comma+1:], " \t") // OWS (RFC 9110, 5.6.3)
		if entry != "" {                             // an empty list element is no hop (RFC 9110, 5.6.1)
			a, ok := parseNode(entry)
			if !ok {
				return a, a, false, fmt.Errorf("cannot tell the client's address: %s entry %s is not an IP address", name, bounded.Quote(entry))
			}
			if !Trusted(a, proxies) {
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
func scanForwarded(line string, proxies []netip.Prefix) (client, first netip.Addr, found bool, err error) {
	var last string // the node of the last element not from a trusted proxy
	for s, i := line, 0; i < len(s); i++ {
		node, empty, next, ok := forwardedElement(s, i)
		if !ok {
			return client, first, false, fmt.Errorf("cannot tell the client's address: the Forwarded field %s is not well-formed", bounded.Quote(line))
		}
		i = next
		if empty {
			continue
		}
		if a, ok := parseNode(node); ok && Trusted(a, proxies) {
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
		return client, first, false, errors.New("cannot tell the client's address: a Forwarded element has no for=")
	}
	return client, first, false, fmt.Errorf("cannot tell the client's address: Forwarded names it %s, not an IP address", bounded.Quote(last))
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
// "2001:db8::1", "[2001:db8::1]:4711"). The address is returned
// normalized (Normalize). Anything else ("unknown", "_hidden") is not a
// node.
func parseNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return Normalize(a), true
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
	return Normalize(a), true
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
