package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
)

func TestClientIPKey(t *testing.T) {
	proxies := prefixes("10.0.0.0/8", "2001:db8:ffff::/48")
	behind := httplimit.ClientIP{TrustedProxies: proxies}
	forwarded := httplimit.ClientIP{TrustedProxies: proxies, Header: "forwarded"}
	realIP := httplimit.ClientIP{TrustedProxies: proxies, Header: "X-Real-IP"}
	const xff = "X-Forwarded-For"
	for _, c := range []struct {
		name string
		ip   httplimit.ClientIP
		r    *http.Request
		want string // the key, or the error's text
	}{
		// No proxy trusted: the peer, whatever the headers say.
		{"peer v4", httplimit.ClientIP{}, request("192.0.2.1:1234"), "192.0.2.1"},
		{"forged XFF ignored", httplimit.ClientIP{}, request("192.0.2.1:1234", xff, "198.51.100.7"), "192.0.2.1"},
		{"forged Forwarded ignored", httplimit.ClientIP{Header: "Forwarded"}, request("192.0.2.1:1234", "Forwarded", "for=198.51.100.7"), "192.0.2.1"},
		{"untrusted peer, trusted-looking XFF", behind, request("192.0.2.1:1234", xff, "203.0.113.5, 10.0.0.1"), "192.0.2.1"},
		{"v4-mapped peer", httplimit.ClientIP{}, request("[::ffff:192.0.2.1]:1234"), "192.0.2.1"},
		{"peer v6 by /64", httplimit.ClientIP{}, request("[2001:db8:1:2:3:4:5:6]:1234"), "2001:db8:1:2::/64"},
		{"peer link-local with zone", httplimit.ClientIP{}, request("[fe80::1%eth0]:1234"), "fe80::1%eth0"},
		{"peer link-local by address", httplimit.ClientIP{}, request("[fe80::2:3:4:5]:1234"), "fe80::2:3:4:5"},
		{"peer NAT64", httplimit.ClientIP{}, request("[64:ff9b::192.0.2.1]:1234"), "192.0.2.1"},
		{"peer NAT64 whole", httplimit.ClientIP{IPv6Prefix: 128}, request("[64:ff9b::c000:201]:1234"), "192.0.2.1"},
		{"peer local-use NAT64", httplimit.ClientIP{}, request("[64:ff9b:1:2:3:4:c000:201]:1234"), "64:ff9b:1:2:3:4:c000:201"},
		{"peer IPv4-compatible", httplimit.ClientIP{}, request("[::192.0.2.1]:1234"), "192.0.2.1"},
		{"peer IPv4-translated", httplimit.ClientIP{}, request("[::ffff:0:192.0.2.1]:1234"), "192.0.2.1"},
		{"peer loopback", httplimit.ClientIP{}, request("[::1]:1234"), "::1"},
		{"peer in ::/64", httplimit.ClientIP{}, request("[::1:0:0:1]:1234"), "::1:0:0:1"},
		{"peer Teredo", httplimit.ClientIP{}, request("[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1234"), "192.0.2.45"},
		{"peer 6to4", httplimit.ClientIP{}, request("[2002:c000:201:5::1]:1234"), "192.0.2.1"},
		{"peer v6 by /56", httplimit.ClientIP{IPv6Prefix: 56}, request("[2001:db8:1:2ff:3:4:5:6]:1234"), "2001:db8:1:200::/56"},
		{"peer v6 whole", httplimit.ClientIP{IPv6Prefix: 128}, request("[2001:db8::6]:1234"), "2001:db8::6"},
		{"peer without port", httplimit.ClientIP{}, request("192.0.2.1"), "192.0.2.1"},

		// Behind trusted proxies: the rightmost untrusted address.
		{"one proxy", behind, request("10.0.0.1:80", xff, "203.0.113.5"), "203.0.113.5"},
		{"forged left part", behind, request("10.0.0.1:80", xff, "1.2.3.4, 203.0.113.5"), "203.0.113.5"},
		{"garbage left part", behind, request("10.0.0.1:80", xff, "not-an-ip, 203.0.113.5"), "203.0.113.5"},
		{"two proxies", behind, request("10.0.0.1:80", xff, "1.2.3.4, 203.0.113.5, 10.9.9.9"), "203.0.113.5"},
		{"lines", behind, request("10.0.0.1:80", xff, "1.2.3.4, 203.0.113.5", xff, "10.9.9.9, 10.1.1.1"), "203.0.113.5"},
		{"empty elements", behind, request("10.0.0.1:80", xff, "203.0.113.5,, 10.9.9.9 ,"), "203.0.113.5"},
		{"port", behind, request("10.0.0.1:80", xff, "203.0.113.5:4711"), "203.0.113.5"},
		{"v6 in XFF", behind, request("10.0.0.1:80", xff, "2001:db8:5:6::1"), "2001:db8:5:6::/64"},
		{"NAT64 in XFF", behind, request("10.0.0.1:80", xff, "[64:ff9b::203.0.113.5]:80"), "203.0.113.5"},
		{"link-local in XFF", behind, request("10.0.0.1:80", xff, "fe80::7%en1"), "fe80::7%en1"},
		{"bracketed v6 with port", behind, request("10.0.0.1:80", xff, "[2001:db8:5:6::1]:443"), "2001:db8:5:6::/64"},
		{"v6 proxy", behind, request("[2001:db8:ffff::1]:80", xff, "203.0.113.5, 2001:db8:ffff:1::2"), "203.0.113.5"},
		{"all trusted: the leftmost", behind, request("10.0.0.1:80", xff, "10.1.1.1, 10.2.2.2"), "10.1.1.1"},
		{"no header: the peer", behind, request("10.0.0.1:80"), "10.0.0.1"},
		{"other header", realIP, request("10.0.0.1:80", "X-Real-Ip", "203.0.113.5", xff, "1.1.1.1"), "203.0.113.5"},
		{"the XFF is not read with Header set", realIP, request("10.0.0.1:80", xff, "1.1.1.1"), "10.0.0.1"},

		// RFC 7239 Forwarded.
		{"Forwarded", forwarded, request("10.0.0.1:80", "Forwarded", "for=203.0.113.5;proto=https"), "203.0.113.5"},
		{"Forwarded chain", forwarded, request("10.0.0.1:80", "Forwarded", `for=1.2.3.4, for="203.0.113.5:4711";by=10.0.0.1, For=10.9.9.9`), "203.0.113.5"},
		{"Forwarded quoted v6", forwarded, request("10.0.0.1:80", "Forwarded", `for="[2001:db8:5:6::1]:4711"`), "2001:db8:5:6::/64"},
		{"Forwarded comma in a quoted value", forwarded, request("10.0.0.1:80", "Forwarded", `for=203.0.113.5;host="a,b", for=10.9.9.9`), "203.0.113.5"},
		{"Forwarded lines", forwarded, request("10.0.0.1:80", "Forwarded", "for=203.0.113.5", "Forwarded", "for=10.9.9.9"), "203.0.113.5"},
		{"Forwarded unknown on the left", forwarded, request("10.0.0.1:80", "Forwarded", "for=unknown, for=203.0.113.5"), "203.0.113.5"},
		{"Forwarded all trusted", forwarded, request("10.0.0.1:80", "Forwarded", "for=10.1.1.1;proto=http, for=10.2.2.2"), "10.1.1.1"},
		{"Forwarded empty element", forwarded, request("10.0.0.1:80", "Forwarded", "for=203.0.113.5, , for=10.2.2.2"), "203.0.113.5"},
		{"XFF not read for Forwarded", forwarded, request("10.0.0.1:80", xff, "203.0.113.5"), "10.0.0.1"},

		// The client cannot be told: errors, never the proxy's key.
		{"garbage where the client is", behind, request("10.0.0.1:80", xff, "203.0.113.5, garbage, 10.9.9.9"),
			`httplimit: the request carries no key: cannot tell the client's address: X-Forwarded-For entry "garbage" is not an IP address`},
		{"Forwarded unknown", forwarded, request("10.0.0.1:80", "Forwarded", "for=203.0.113.5, for=unknown"),
			`httplimit: the request carries no key: cannot tell the client's address: Forwarded names it "unknown", not an IP address`},
		{"Forwarded obfuscated", forwarded, request("10.0.0.1:80", "Forwarded", "for=_hidden"),
			`httplimit: the request carries no key: cannot tell the client's address: Forwarded names it "_hidden", not an IP address`},
		{"Forwarded quoted dash is no empty element", forwarded, request("10.0.0.1:80", "Forwarded", `for="-";proto=https`),
			`httplimit: the request carries no key: cannot tell the client's address: Forwarded names it "-", not an IP address`},
		{"Forwarded without for", forwarded, request("10.0.0.1:80", "Forwarded", "for=203.0.113.5, proto=https"),
			`httplimit: the request carries no key: cannot tell the client's address: a Forwarded element has no for=`},
		{"Forwarded not well-formed", forwarded, request("10.0.0.1:80", "Forwarded", `for="1.2.3.4, for=203.0.113.5`),
			`httplimit: the request carries no key: cannot tell the client's address: the Forwarded field "for=\"1.2.3.4, for=203.0.113.5" is not well-formed`},
		{"Forwarded forged quote swallows the proxy's v6", forwarded, request("10.0.0.1:80", "Forwarded", `for="x, for="[2001:db8::1]"`),
			`httplimit: the request carries no key: cannot tell the client's address: the Forwarded field "for=\"x, for=\"[2001:db8::1]\"" is not well-formed`},
		{"Forwarded two for=", forwarded, request("10.0.0.1:80", "Forwarded", `for=1.2.3.4;for=203.0.113.5`),
			`httplimit: the request carries no key: cannot tell the client's address: the Forwarded field "for=1.2.3.4;for=203.0.113.5" is not well-formed`},
		{"bad RemoteAddr", httplimit.ClientIP{}, request("pipe"),
			`httplimit: cannot tell the client's address: RemoteAddr "pipe" is not an IP address and port`},
		{"bad prefix", httplimit.ClientIP{IPv6Prefix: 129}, request("192.0.2.1:1"),
			`httplimit: ClientIP.IPv6Prefix 129 is not between 1 and 128`},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, err := c.ip.Key(c.r)
			if err != nil {
				require.Equal(t, c.want, err.Error())
				require.Empty(t, key)
				return
			}
			require.Equal(t, c.want, key)
		})
	}
}

// An error from an unreadable forwarding header is the client's (400);
// one from RemoteAddr or the configuration is the server's (500).
func TestClientIPErrorKinds(t *testing.T) {
	behind := httplimit.ClientIP{TrustedProxies: prefixes("10.0.0.0/8")}
	for _, c := range []struct {
		name    string
		ip      httplimit.ClientIP
		r       *http.Request
		clients bool // the error wraps ErrNoKey
	}{
		{"garbage in X-Forwarded-For", behind, request("10.0.0.1:80", "X-Forwarded-For", "garbage"), true},
		{"RemoteAddr not an address", behind, request("unix"), false},
		{"IPv6Prefix out of range", httplimit.ClientIP{IPv6Prefix: -1}, request("10.0.0.1:80"), false},
	} {
		_, err := c.ip.Key(c.r)
		require.Error(t, err, c.name)
		require.Equal(t, c.clients, errors.Is(err, quota.ErrNoKey), "%s: %v", c.name, err)
	}
}

func TestClientIPAddr(t *testing.T) {
	ip := httplimit.ClientIP{TrustedProxies: prefixes("10.0.0.0/8")}
	a, err := ip.Addr(request("10.0.0.1:80", "X-Forwarded-For", "2001:db8:1:2:3:4:5:6"))
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddr("2001:db8:1:2:3:4:5:6"), a, "Addr does not group")
}

// TestEmbeddedIPv4ClientsKeepTheirOwnKeys pins issue 24.6: clients whose
// IPv6 addresses embed their IPv4 address (through NAT64, as
// IPv4-compatible ::a.b.c.d, over Teredo) each collapsed to one /64 key, as
// did link-local clients across zones, and ::a.b.c.d shared ::1's: one
// client drained everyone's quota (3 admitted of 10 clients, each family).
// Each is keyed by its IPv4 address now, a link-local one by its address
// and zone: 10 of 10. And the other way: a 6to4 site, one IPv4 address,
// had a key for each /64 of its /48 (10 of 10); now one (3 of 10).
func TestEmbeddedIPv4ClientsKeepTheirOwnKeys(t *testing.T) {
	admitted := map[string]int{}
	for _, family := range []struct {
		name string
		addr func(i int) string // the i-th request's RemoteAddr
	}{
		{"NAT64", func(i int) string { return fmt.Sprintf("[64:ff9b::198.51.100.%d]:1", i) }},
		{"IPv4-compatible", func(i int) string { return fmt.Sprintf("[::198.51.100.%d]:1", i) }},
		{"Teredo", func(i int) string { return fmt.Sprintf("[2001:0:4136:e378:8000:63bf:3fff:%x]:1", 0xff00+i) }},
		{"link-local zones", func(i int) string { return fmt.Sprintf("[fe80::1%%eth%d]:1", i) }},
		{"link-local addresses", func(i int) string { return fmt.Sprintf("[fe80::%x]:1", i+1) }},
		{"one 6to4 site's subnets", func(i int) string { return fmt.Sprintf("[2002:c633:6401:%x::1]:1", i) }},
	} {
		var reqs []*http.Request
		for i := range 10 {
			reqs = append(reqs, request(family.addr(i)))
		}
		admitted[family.name] = countAdmitted(t, httplimit.ClientIP{}, reqs)
		t.Logf("%s: %d of 10 requests admitted on a quota of 3 a key", family.name, admitted[family.name])
	}
	reqs := []*http.Request{request("[::1]:1"), request("[::1]:1"), request("[::1]:1"), request("[::192.0.2.1]:1")}
	admitted["::1, ::192.0.2.1"] = countAdmitted(t, httplimit.ClientIP{}, reqs) - 2 // ::1 thrice, then the other
	t.Logf("::1 three times, then ::192.0.2.1: %d of 2 clients admitted", admitted["::1, ::192.0.2.1"])
	require.Equal(t, map[string]int{"NAT64": 10, "IPv4-compatible": 10, "Teredo": 10, "link-local zones": 10,
		"link-local addresses": 10, "one 6to4 site's subnets": 3, "::1, ::192.0.2.1": 2}, admitted, "requests admitted")
}

// A client that rotates its IPv6 address within its /64 shares one limit;
// a neighbouring /64 has its own.
func TestIPv6RotationSharesALimit(t *testing.T) {
	var reqs []*http.Request
	for i := range 10 {
		reqs = append(reqs, request(netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, byte(i), 9, 9, 9, 9, 9, 9, byte(i)}), 1000).String()))
	}
	require.Equal(t, 3, countAdmitted(t, httplimit.ClientIP{}, reqs), "one /64")
	require.Equal(t, 10, countAdmitted(t, httplimit.ClientIP{IPv6Prefix: 128}, reqs), "every address alone")
	reqs = append(reqs, request("[2001:db8:1:3::1]:1000"))
	require.Equal(t, 4, countAdmitted(t, httplimit.ClientIP{}, reqs), "the next /64 is another client")
}

// Over a real connection from 127.0.0.1, an untrusted peer: a forged
// X-Forwarded-For changes nothing, every request counts against the peer.
func TestForgedForwardedForOverTheWire(t *testing.T) {
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.ClientIP{}.Key,
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(3), clock.NewMock())},
		OnDecision: seen.record,
	})(&ok{}))
	var statuses []int
	for _, forged := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3, 203.0.113.4", "203.0.113.5", "2001:db8::1"} {
		statuses = append(statuses, get(t, srv.URL, "X-Forwarded-For", forged, "Forwarded", "for="+forged).status)
	}
	require.Equal(t, []int{200, 200, 200, 429, 429}, statuses)
	for _, d := range seen.list() {
		require.Equal(t, "127.0.0.1", d.Key)
	}
}

// Over a real connection through a trusted proxy (the test client on
// 127.0.0.1 plays it): the rightmost untrusted address is the client,
// whatever the client wrote to its left.
func TestTrustedProxyOverTheWire(t *testing.T) {
	seen := &decisions{}
	srv := serve(t, limited(t, httplimit.Config{
		Key:        httplimit.ClientIP{TrustedProxies: prefixes("127.0.0.0/8", "::1/128")}.Key,
		Policies:   []quota.Policy{bucket(t, "minute", keylimit.PerMinute(2), clock.NewMock())},
		OnDecision: seen.record,
	})(&ok{}))
	send := func(xff string) int { return get(t, srv.URL, "X-Forwarded-For", xff).status }
	// The client 203.0.113.9 forges a different leftmost address each time.
	require.Equal(t, 200, send("1.1.1.1, 203.0.113.9"))
	require.Equal(t, 200, send("2.2.2.2, 203.0.113.9, 127.0.0.2"))
	require.Equal(t, 429, send("3.3.3.3, 203.0.113.9"))
	// Another client is counted apart.
	require.Equal(t, 200, send("203.0.113.10"))
	var keys []string
	for _, d := range seen.list() {
		keys = append(keys, d.Key)
	}
	require.Equal(t, []string{"203.0.113.9", "203.0.113.9", "203.0.113.9", "203.0.113.10"}, keys)
	got := get(t, srv.URL, "X-Forwarded-For", "not an address")
	require.Equal(t, http.StatusBadRequest, got.status)
}

// TestLongHeadersAreNotEchoed is issue 13's defect 7: a malformed Forwarded
// field of 900 KB, hops appended by trusted proxies included, came back
// whole, escaped, in a 4.5 MB body. The error quotes the first 64 bytes and
// says how long the value was; so does every error built from a header.
func TestLongHeadersAreNotEchoed(t *testing.T) {
	long := strings.Repeat("x", 900<<10)
	proxies := prefixes("10.0.0.0/8")
	for _, c := range []struct {
		name   string
		ip     httplimit.ClientIP
		header []string
		quoted string // what the error quotes of the value
	}{
		{"a Forwarded field that is not well-formed", httplimit.ClientIP{TrustedProxies: proxies, Header: "Forwarded"},
			[]string{"Forwarded", `for="` + long + `, for=10.0.0.7`},
			`the Forwarded field "for=\"` + strings.Repeat("x", 59) + `"... (921619 bytes) is not well-formed`},
		{"a Forwarded node that is not an address", httplimit.ClientIP{TrustedProxies: proxies, Header: "Forwarded"},
			[]string{"Forwarded", `for="` + long + `", for=10.0.0.7`},
			`Forwarded names it "` + strings.Repeat("x", 64) + `"... (921600 bytes), not an IP address`},
		{"an X-Forwarded-For entry that is not an address", httplimit.ClientIP{TrustedProxies: proxies},
			[]string{"X-Forwarded-For", long + ", 10.0.0.7"},
			`X-Forwarded-For entry "` + strings.Repeat("x", 64) + `"... (921600 bytes) is not an IP address`},
	} {
		h := limited(t, httplimit.Config{
			Key:      c.ip.Key,
			Policies: []quota.Policy{bucket(t, "minute", keylimit.PerMinute(3), clock.NewMock())},
		})(&ok{})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, request("10.0.0.1:80", c.header...))
		require.Equal(t, http.StatusBadRequest, w.Code, c.name)
		body := decodeRefusal(t, w.Body.String())
		require.Equal(t, "httplimit: the request carries no key: cannot tell the client's address: "+c.quoted, body.Error, c.name)
		require.Less(t, w.Body.Len(), 512, c.name)
	}
}
