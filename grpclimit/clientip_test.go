package grpclimit_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/grpclimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientIP keys calls by the peer over a real TCP connection, and believes
// forwarded metadata only from a trusted proxy, with httplimit's rules:
// read from the right, past the trusted proxies; the leftmost, which the
// client writes, never believed.
func TestClientIPKeys(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, tc := range []struct {
		name string
		ip   grpclimit.ClientIP
		md   []string // metadata, key, value pairs
		want string   // the key, or the error's message
		code codes.Code
	}{
		{"peer", grpclimit.ClientIP{}, nil, "127.0.0.1", codes.OK},
		{"forged, from an untrusted peer", grpclimit.ClientIP{},
			[]string{"x-forwarded-for", "203.0.113.7"}, "127.0.0.1", codes.OK},
		{"forwarded by a trusted proxy", grpclimit.ClientIP{TrustedProxies: loopback},
			[]string{"x-forwarded-for", "198.51.100.1, 203.0.113.7, 127.0.0.5"}, "203.0.113.7", codes.OK},
		{"one value per line, the last appended last", grpclimit.ClientIP{TrustedProxies: loopback},
			[]string{"x-forwarded-for", "198.51.100.1", "x-forwarded-for", "203.0.113.7"}, "203.0.113.7", codes.OK},
		{"no forwarded metadata from a trusted peer", grpclimit.ClientIP{TrustedProxies: loopback},
			nil, "127.0.0.1", codes.OK},
		{"RFC 7239 forwarded", grpclimit.ClientIP{TrustedProxies: loopback, Header: "Forwarded"},
			[]string{"forwarded", `for=198.51.100.1, for="[2001:db8:1:2::77]:4711"`}, "2001:db8:1:2::/64", codes.OK},
		{"a header named in any case", grpclimit.ClientIP{TrustedProxies: loopback, Header: "X-Real-Client"},
			[]string{"x-real-client", "192.0.2.9"}, "192.0.2.9", codes.OK},
		{"IPv6 per address", grpclimit.ClientIP{TrustedProxies: loopback, IPv6Prefix: 128},
			[]string{"x-forwarded-for", "2001:db8::1"}, "2001:db8::1", codes.OK},
		{"NAT64: the IPv4 client", grpclimit.ClientIP{TrustedProxies: loopback},
			[]string{"x-forwarded-for", "64:ff9b::203.0.113.7"}, "203.0.113.7", codes.OK},
		{"link-local: the address and its zone", grpclimit.ClientIP{TrustedProxies: loopback},
			[]string{"x-forwarded-for", "fe80::7%eth1"}, "fe80::7%eth1", codes.OK},
		{"not an address", grpclimit.ClientIP{TrustedProxies: loopback},
			[]string{"x-forwarded-for", "203.0.113.7, unknown"},
			`grpclimit: the call carries no key: cannot tell the client's address: X-Forwarded-For entry "unknown" is not an IP address`,
			codes.InvalidArgument},
		{"a prefix out of range", grpclimit.ClientIP{IPv6Prefix: 129}, nil,
			"grpclimit: the server cannot decide the call's rate limit", codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen decisions
			srv := newServer(t, grpclimit.Config{
				Key:        tc.ip.Key,
				Policies:   []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), newMock())}},
				OnDecision: seen.record,
			})
			b := start(t, setup{tcp: true, server: limitedBy(srv)})
			a := b.check(context.Background(), tc.md...)
			require.Equal(t, tc.code, a.code(), "code: %v", a.err)
			if tc.code != codes.OK {
				require.Equal(t, tc.want, status.Convert(a.err).Message())
				require.Empty(t, seen.all(), "decisions")
				return
			}
			require.Equal(t, []string{tc.want}, seen.keys())
		})
	}
}

// ClientIP has httplimit.ClientIP's fields: the one converts to the other,
// as when it was defined on it.
var _ = grpclimit.ClientIP(httplimit.ClientIP{})

// Over bufconn the peer has no IP address: the server's configuration is
// wrong, not the client's call (Internal), and Config.Error is told why.
// Addr gives the address unprefixed, and its errors wrap quota.ErrNoKey when the
// client is at fault.
func TestClientIPWithoutAnIPPeer(t *testing.T) {
	var mu sync.Mutex
	var got error
	srv := newServer(t, grpclimit.Config{
		Key:      grpclimit.ClientIP{}.Key,
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), newMock())}},
		Error: func(_ context.Context, _ string, err error) error {
			mu.Lock()
			got = err
			mu.Unlock()
			return status.Error(codes.Internal, "no key")
		},
	})
	b := start(t, setup{server: limitedBy(srv)})
	require.Equal(t, codes.Internal, b.check(context.Background()).code())
	mu.Lock()
	defer mu.Unlock()
	require.EqualError(t, got, `grpclimit: cannot tell the client's address: RemoteAddr "bufconn" is not an IP address and port`)
	require.NotErrorIs(t, got, quota.ErrNoKey)

	_, err := grpclimit.ClientIP{}.Key(context.Background(), checkMethod)
	require.EqualError(t, err, "grpclimit: the context has no peer: ClientIP keys the calls of a server")
}

// Addr reads the same address as Key, before grouping by prefix; its
// errors for a client's bad metadata wrap quota.ErrNoKey.
func TestClientIPAddr(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	ip := grpclimit.ClientIP{TrustedProxies: loopback}
	type seen struct {
		addr netip.Addr
		err  error
	}
	var mu sync.Mutex
	var got []seen
	srv := newServer(t, grpclimit.Config{
		Key: func(ctx context.Context, method string) (string, error) {
			a, err := ip.Addr(ctx)
			mu.Lock()
			got = append(got, seen{a, err})
			mu.Unlock()
			return ip.Key(ctx, method)
		},
		Policies: []quota.Policy{{Name: "minute", Limiter: newBucket(t, keylimit.PerMinute(10), newMock())}},
	})
	b := start(t, setup{tcp: true, server: limitedBy(srv)})
	require.NoError(t, b.check(context.Background(), "x-forwarded-for", "2001:db8:1:2::77").err)
	require.Equal(t, codes.InvalidArgument, b.check(context.Background(), "x-forwarded-for", "_hidden").code())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	require.Equal(t, netip.MustParseAddr("2001:db8:1:2::77"), got[0].addr)
	require.ErrorIs(t, got[1].err, quota.ErrNoKey)
}
