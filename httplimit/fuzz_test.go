package httplimit_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/keylimit/keylimit/httplimit"
	"github.com/stretchr/testify/require"
)

// FuzzClientIP feeds ClientIP forwarding headers as a client may write
// them. For X-Forwarded-For it compares the answer with a plain reference:
// all lines joined into one list, read from the right, past the trusted
// proxies. The same list written as Forwarded elements must answer the
// same; and any Forwarded field answers a plain address or an error that
// wraps ErrNoKey, and never panics.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.5, 10.0.0.9", "", "for=203.0.113.5;proto=https, for=10.0.0.9")
	f.Add("1.2.3.4, garbage, 10.0.0.9", "10.1.1.1", `for="[2001:db8::1]:4711", for=unknown`)
	f.Add(" , [2001:db8::1]:80,", "::ffff:10.0.0.1", `for="x, for="[2001:db8::1]"`)
	f.Add("10.0.0.1", "10.0.0.2", `for=_hidden;by=10.0.0.1, ;;, for=10.0.0.3`)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	inTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	peer := netip.MustParseAddr("10.0.0.254")
	f.Fuzz(func(t *testing.T, line1, line2, fwd string) {
		r, err := http.NewRequest(http.MethodGet, "http://example.test/", nil)
		require.NoError(t, err)
		r.RemoteAddr = netip.AddrPortFrom(peer, 1234).String()
		r.Header.Add("X-Forwarded-For", line1)
		r.Header.Add("X-Forwarded-For", line2)
		r.Header.Add("Forwarded", fwd)

		got, gotErr := httplimit.ClientIP{TrustedProxies: trusted}.Addr(r)
		want, wantOK := referenceXFF(line1+","+line2, peer, inTrusted)
		require.Equal(t, wantOK, gotErr == nil, "X-Forwarded-For %q, %q: got %v, %v; the reference says %v", line1, line2, got, gotErr, want)
		if wantOK {
			require.Equal(t, want, got, "X-Forwarded-For %q, %q", line1, line2)
		} else {
			require.ErrorIs(t, gotErr, httplimit.ErrNoKey, "X-Forwarded-For %q, %q", line1, line2)
		}

		// Whatever a client wrote, Forwarded answers an address or an
		// ErrNoKey, and never panics.
		fwdIP := httplimit.ClientIP{TrustedProxies: trusted, Header: "Forwarded"}
		if got, err := fwdIP.Addr(r); err != nil {
			require.ErrorIs(t, err, httplimit.ErrNoKey, "Forwarded %q", fwd)
		} else {
			require.True(t, got.IsValid() && !got.Is4In6() && got.Zone() == "", "Forwarded %q: address %v is not a plain address", fwd, got)
		}

		// The X-Forwarded-For list as well-formed Forwarded elements, each
		// node quoted, answers as X-Forwarded-For does.
		if strings.ContainsAny(line1+line2, `"\`) {
			return
		}
		var elements []string
		for _, e := range strings.Split(line1+","+line2, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				elements = append(elements, `for="`+e+`";proto=https`)
			}
		}
		r.Header.Set("Forwarded", strings.Join(elements, ", "))
		got, gotErr = fwdIP.Addr(r)
		require.Equal(t, wantOK, gotErr == nil, "Forwarded %q: got %v, %v; the reference says %v", r.Header.Get("Forwarded"), got, gotErr, want)
		if wantOK {
			require.Equal(t, want, got, "Forwarded %q", r.Header.Get("Forwarded"))
		}
	})
}

// referenceXFF is the rule for X-Forwarded-For written as plainly as it
// can be: the list's entries from the right; skip the trusted proxies; the
// first other entry is the client, and if it is not an address, nobody can
// tell; if all are trusted, the leftmost, or the peer for an empty list.
func referenceXFF(list string, peer netip.Addr, trusted func(netip.Addr) bool) (netip.Addr, bool) {
	var entries []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.Trim(e, " \t"); e != "" {
			entries = append(entries, e)
		}
	}
	client := peer
	for i := len(entries) - 1; i >= 0; i-- {
		a, ok := referenceNode(entries[i])
		if !ok {
			return netip.Addr{}, false
		}
		if !trusted(a) {
			return a, true
		}
		client = a
	}
	return client, true
}

// referenceNode reads "a", "a:port", "[a]" or "[a]:port", with a an IP
// address, returned unmapped and without zone.
func referenceNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	host, port := s, ""
	if rest, ok := strings.CutPrefix(s, "["); ok {
		var found bool
		if host, port, found = strings.Cut(rest, "]"); !found {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	} else {
		return netip.Addr{}, false
	}
	if port != "" && !referencePort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// referencePort: ":" and 1 to 5 digits, or "_" and letters, digits, '.',
// '_', '-'.
func referencePort(p string) bool {
	p, ok := strings.CutPrefix(p, ":")
	if !ok || p == "" {
		return false
	}
	if obf, ok := strings.CutPrefix(p, "_"); ok {
		return obf != "" && strings.Trim(obf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
	}
	return len(p) <= 5 && strings.Trim(p, "0123456789") == ""
}
