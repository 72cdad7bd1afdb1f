package forwarded

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// KeyIn gives Key's key, and the host part of the peer's own text where
// that is the key, not a copy of it.
func TestKeyIn(t *testing.T) {
	for _, c := range []struct {
		s      string // the peer's text
		a      string // the address keyed, if not the peer's
		bits   int
		want   string
		inText bool // the key is a part of s
	}{
		{s: "192.0.2.1:40000", want: "192.0.2.1", inText: true},
		{s: "192.0.2.1", want: "192.0.2.1", inText: true},
		{s: "[::ffff:192.0.2.1]:80", want: "192.0.2.1"},
		{s: "[2001:db8:1:2:3:4:5:6]:80", want: "2001:db8:1:2::/64"},
		{s: "[2001:db8:1:2:3:4:5:6]:80", bits: 128, want: "2001:db8:1:2:3:4:5:6"},
		// The client's address came from a forwarding field, not the peer.
		{s: "10.0.0.1:80", a: "203.0.113.9", want: "203.0.113.9"},
		{s: "10.0.0.1:80", a: "10.0.0.10", want: "10.0.0.10"},
		{s: "10.0.0.10:80", a: "10.0.0.1", want: "10.0.0.1"},
	} {
		a, ok := Peer(c.s)
		require.True(t, ok, c.s)
		if c.a != "" {
			a = netip.MustParseAddr(c.a)
		}
		got := KeyIn(a, c.bits, c.s)
		require.Equal(t, c.want, got, c.s)
		require.Equal(t, Key(a, c.bits), got, c.s)
		require.Equal(t, c.inText, unsafe.StringData(got) == unsafe.StringData(c.s), "%s: is the key a part of the text", c.s)
	}
	s := "198.51.100.7:5000"
	a, _ := Peer(s)
	require.Zero(t, testing.AllocsPerRun(100, func() { KeyIn(a, 0, s) }))
}

// FuzzKeyIn: whatever the peer's text and the address, KeyIn's key is
// Key's.
func FuzzKeyIn(f *testing.F) {
	f.Add("192.0.2.1:40000", "", uint8(0))
	f.Add("[::ffff:192.0.2.1]:80", "", uint8(64))
	f.Add("10.0.0.1:80", "10.0.0.10", uint8(128))
	f.Add("1.2.3.4:", "1.2.3.4", uint8(0))
	f.Fuzz(func(t *testing.T, s, addr string, bits uint8) {
		a, ok := Peer(s)
		if other, err := netip.ParseAddr(addr); err == nil {
			a, ok = Normalize(other), true
		}
		if !ok {
			return
		}
		b := int(bits) % 129
		if got, want := KeyIn(a, b, s), Key(a, b); got != want {
			t.Fatalf("KeyIn(%v, %d, %q) = %q, Key says %q", a, b, s, got, want)
		}
	})
}

// FuzzPeerIPv4: whatever the peer's text, PeerIPv4 reads what Peer does and
// keys it as KeyIn does, or leaves it to them; it takes every IPv4 peer as
// netip.AddrPort writes it.
func FuzzPeerIPv4(f *testing.F) {
	for _, s := range []string{"192.0.2.1:40000", "1.2.3.4:", "01.2.3.4:80", "1.2.3.4:65536", "1.2.3.4:0065535",
		"256.1.1.1:1", "1.2.3:4", "1.2.3.4.5:6", "1.2.3.4", "[::1]:80", "1.2.3.4%eth0:80", "1..3.4:5", ":80", "1.2.3.4:+80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, host, ok := PeerIPv4(s)
		want, wantOK := Peer(s)
		if !ok {
			if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Is4() {
				t.Fatalf("PeerIPv4(%q) refuses an IPv4 peer %v", s, ap)
			}
			return
		}
		require.True(t, wantOK, "PeerIPv4(%q) reads an address Peer refuses", s)
		require.Equal(t, want, a, s)
		require.Equal(t, KeyIn(want, 0, s), host, s)
		require.True(t, unsafe.StringData(host) == unsafe.StringData(s), "%s: the host is a part of the text", s)
	})
}
