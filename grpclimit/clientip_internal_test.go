package grpclimit

import (
	"net"
	"net/netip"
	"testing"

	"github.com/keylimit/keylimit/internal/forwarded"
	"github.com/stretchr/testify/require"
)

// A link-local peer keeps its zone, read from the connection's address
// without formatting it, and is keyed by it (issue 24.6); other zones and
// IPv4-mapped forms are dropped, as before.
func TestPeerAddrKeepsALinkLocalZone(t *testing.T) {
	for _, tc := range []struct {
		addr *net.TCPAddr
		want netip.Addr
		key  string
	}{
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, netip.MustParseAddr("fe80::1%eth0"), "fe80::1%eth0"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth1"}, netip.MustParseAddr("fe80::1%eth1"), "fe80::1%eth1"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Zone: "eth0"}, netip.MustParseAddr("2001:db8::1"), "2001:db8::/64"},
		{&net.TCPAddr{IP: net.ParseIP("64:ff9b::c000:201")}, netip.MustParseAddr("64:ff9b::c000:201"), "192.0.2.1"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.1")}, netip.MustParseAddr("192.0.2.1"), "192.0.2.1"},
	} {
		got, ok := peerAddr(tc.addr)
		require.True(t, ok, "%v", tc.addr)
		require.Equal(t, tc.want, got, "%v", tc.addr)
		require.Equal(t, tc.key, forwarded.Key(got, 0), "%v", tc.addr)
	}
}
