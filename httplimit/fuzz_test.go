package httplimit_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
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
	f.Add(strings.Repeat("\x00", 300)+", 10.0.0.9", "", `for="`+strings.Repeat("\xff", 300)+`, for=10.0.0.9`)
	f.Add("fe80::1%eth0, 10.0.0.9", "fe80::ffff:1%1", `for="[fe80::1%25eth0]:80"`)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"),
		netip.MustParsePrefix("fe80::ffff:0/112")}
	inTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a.WithZone("")) {
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
			require.ErrorIs(t, gotErr, quota.ErrNoKey, "X-Forwarded-For %q, %q", line1, line2)
			require.LessOrEqual(t, len(gotErr.Error()), maxErrorLen, "X-Forwarded-For %q, %q: the error quotes too much", line1, line2)
		}

		// Whatever a client wrote, Forwarded answers an address or an
		// ErrNoKey, and never panics.
		fwdIP := httplimit.ClientIP{TrustedProxies: trusted, Header: "Forwarded"}
		if got, err := fwdIP.Addr(r); err != nil {
			require.ErrorIs(t, err, quota.ErrNoKey, "Forwarded %q", fwd)
			require.LessOrEqual(t, len(err.Error()), maxErrorLen, "Forwarded %q: the error quotes too much", fwd)
		} else {
			require.True(t, got.IsValid() && !got.Is4In6() && (got.Zone() == "" || got.IsLinkLocalUnicast()),
				"Forwarded %q: address %v is not a plain address", fwd, got)
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

// FuzzClientIPKey keys a peer of any address, zone and IPv6Prefix, and
// compares the key with a reference that reads the address's bytes (issue
// 24.6): an IPv6 address that embeds a client's IPv4 address is keyed by
// it, a link-local one by the address and its zone, the rest of ::/64 and
// of the local-use NAT64 prefix by the address, any other by its prefix.
func FuzzClientIPKey(f *testing.F) {
	for _, seed := range []string{"64:ff9b::c000:201", "::c000:201", "::1", "::", "::ffff:0:c000:201", "::ffff:c000:201",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2002:c000:201::1", "fe80::1", "64:ff9b:1::1", "2001:db8::1", "1::1"} {
		b := netip.MustParseAddr(seed).As16()
		f.Add(b[:], "eth0", uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw []byte, zone string, bits uint8) {
		var b [16]byte
		copy(b[:], raw)
		a := netip.AddrFrom16(b).WithZone(zone)
		remote := netip.AddrPortFrom(a, 1).String()
		if ap, err := netip.ParseAddrPort(remote); err != nil || ap.Addr() != a {
			return // a zone that does not survive the round trip through RemoteAddr's text
		}
		ip := httplimit.ClientIP{IPv6Prefix: int(bits) % 129}
		got, err := ip.Key(request(remote))
		require.NoError(t, err, "RemoteAddr %q", remote)
		require.Equal(t, referenceKey(b, a.Zone(), ip.IPv6Prefix), got, "RemoteAddr %q, IPv6Prefix %d", remote, ip.IPv6Prefix)
	})
}

// referenceKey is the key of the client at the address of bytes b with
// zone zone, keyed by prefixes of bits (0: 64), read from its bytes.
func referenceKey(b [16]byte, zone string, bits int) string {
	zero := func(from, to int) bool {
		for _, c := range b[from:to] {
			if c != 0 {
				return false
			}
		}
		return true
	}
	v4 := func(i int, invert bool) string {
		c := [4]byte(b[i : i+4])
		if invert {
			c = [4]byte{^c[0], ^c[1], ^c[2], ^c[3]}
		}
		return netip.AddrFrom4(c).String()
	}
	plain := netip.AddrFrom16(b)
	nat64 := b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b
	switch {
	case zero(0, 10) && b[10] == 0xff && b[11] == 0xff: // IPv4-mapped
		return v4(12, false)
	case nat64 && zero(4, 12):
		return v4(12, false)
	case zero(0, 12) && !(zero(12, 15) && b[15] <= 1): // IPv4-compatible, not :: or ::1
		return v4(12, false)
	case zero(0, 8) && b[8] == 0xff && b[9] == 0xff && zero(10, 12): // IPv4-translated
		return v4(12, false)
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo
		return v4(12, true)
	case b[0] == 0x20 && b[1] == 0x02: // 6to4
		return v4(2, false)
	case b[0] == 0xfe && b[1]&0xc0 == 0x80: // link-local, with its zone
		return plain.WithZone(zone).String()
	case zero(0, 8), nat64 && b[4] == 0 && b[5] == 1, bits == 128:
		return plain.String()
	}
	if bits == 0 {
		bits = 64
	}
	return netip.PrefixFrom(plain, bits).Masked().String()
}

// maxErrorLen bounds the text of an error built from a header: it quotes at
// most 64 bytes of the value, each escaped in at most 4 (\xff), beside a
// fixed text.
const maxErrorLen = 512

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
// address, returned unmapped and without zone, unless it is link-local.
func referenceNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return referenceZone(a.Unmap()), true
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
	return referenceZone(a.Unmap()), true
}

// referenceZone is a without its zone, unless it is link-local: fe80::/10.
func referenceZone(a netip.Addr) netip.Addr {
	if b := a.As16(); a.Is6() && b[0] == 0xfe && b[1]&0xc0 == 0x80 {
		return a
	}
	return a.WithZone("")
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

// maxServerPause is the longest pause the Transport obeys: 10⁹ s (see
// Transport.RoundTrip).
const maxServerPause = 1e9 * time.Second

// FuzzServerPause feeds the Transport answers as a server may write them:
// any status among a few, any Retry-After, any RateLimit lines. The pause it
// takes must be the reference's: Retry-After read plainly, and the
// RateLimit field parsed by the strict RFC 9651 parser of sf_test.go,
// whenever that parser accepts it, its String members naming policies; whatever the field holds (the seeds: a
// deep '(((' that once overflowed the stack, numbers that once wrapped),
// the Transport answers at once, pausing at most 10⁹ s.
func FuzzServerPause(f *testing.F) {
	f.Add(uint8(1), "2", `"m";r=0;t=5`, "")
	f.Add(uint8(0), "", `"minute";r=0;t=42, "hour";r=5;t=600`, `"day";r=0;t=9000`)
	f.Add(uint8(2), "Sun, 01 Mar 2026 12:00:30 GMT", "", "")
	f.Add(uint8(1), "99999999999999999999999", "", "")
	f.Add(uint8(1), "Fri, 31 Dec 9999 23:59:59 GMT", "", "")
	f.Add(uint8(0), "", strings.Repeat("(", 1<<12), `"h";r=0;t=7`)
	f.Add(uint8(1), "", strings.Repeat(`("a" `, 1<<10)+`;r=0;t=3`, "")
	f.Add(uint8(1), "soon", `"m";r=0;t=18446744074`, "")
	f.Add(uint8(0), "", `"m";r=0;t=10000000000, "n";r=0;t=9223372037`, "")
	f.Add(uint8(1), "", `"m";r=3;t=999999999999999`, "")
	f.Add(uint8(0), "", `("a" ("b"));r=0;t=14`, `"m";pk=:cHsx:;r=-0;x="y;z";t=11`)
	f.Add(uint8(3), "5", `"a,b;r=9";r=0;t=6`, `"m;r=0;t=5`)
	f.Add(uint8(0), "", `default;r=0;t=8`, `"h";r=0;t=2`)
	statuses := []int{http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusForbidden, http.StatusInternalServerError}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, pick uint8, retryAfter, line1, line2 string) {
		status := statuses[int(pick)%len(statuses)]
		h := http.Header{}
		if retryAfter != "" {
			h["Retry-After"] = []string{retryAfter}
		}
		for _, line := range []string{line1, line2} {
			if line != "" {
				h["Ratelimit"] = append(h["Ratelimit"], line)
			}
		}
		tr := &httplimit.Transport{
			Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: h, Body: http.NoBody}, nil
			}),
			Key:   func(*http.Request) (string, error) { return "partner", nil },
			Clock: stoppedClock{now: now},
		}
		req, err := http.NewRequest(http.MethodGet, "http://partner.test/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, status, resp.StatusCode)

		// A request whose context has ended fails at once and says until
		// when the key is paused.
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = tr.RoundTrip(req.WithContext(ended))
		require.ErrorIs(t, err, context.Canceled)
		got := transportError(t, err).Until
		require.True(t, got.IsZero() || got.After(now) && !got.After(now.Add(maxServerPause)), "pause until %v", got)
		if want, known := referencePause(status, h, now); known {
			require.True(t, want.Equal(got), "status %d, Retry-After %q, RateLimit %q: paused until %v, want %v", status, retryAfter, h["Ratelimit"], got, want)
		}
	})
}

// referencePause is the pause an answer asks for, as RFC 9110 and the
// RateLimit draft say, read plainly; known is false if the RateLimit field
// decides and the strict parser rejects it.
func referencePause(status int, h http.Header, now time.Time) (until time.Time, known bool) {
	refused := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	if v := strings.Trim(h.Get("Retry-After"), " \t"); refused && v != "" {
		at, ok := time.Time{}, false
		if strings.Trim(v, "0123456789") == "" { // delay-seconds
			secs, err := strconv.ParseUint(v, 10, 64)
			if err != nil || secs > uint64(maxServerPause/time.Second) {
				secs = uint64(maxServerPause / time.Second)
			}
			at, ok = now.Add(time.Duration(secs)*time.Second), true
		} else if date, err := http.ParseTime(v); err == nil { // an HTTP-date
			at, ok = date, true
			if date.After(now.Add(maxServerPause)) {
				at = now.Add(maxServerPause)
			}
		}
		if ok {
			if !at.After(now) {
				return time.Time{}, true
			}
			return at, true
		}
	}
	lines := h["Ratelimit"]
	if len(lines) == 0 {
		return time.Time{}, true
	}
	items, err := parseSFList(strings.Join(lines, ","))
	if err != nil {
		return time.Time{}, false
	}
	param := func(it sfItem, key string) int64 {
		if n, ok := it.param(key).(int64); ok && n >= 0 {
			return n
		}
		return -1
	}
	exhausted, any := int64(-1), int64(-1)
	for _, it := range items {
		if _, named := it.value.(string); !named {
			continue // a Token names no policy
		}
		r, t := param(it, "r"), param(it, "t")
		if t < 0 {
			continue
		}
		any = max(any, t)
		if r == 0 {
			exhausted = max(exhausted, t)
		}
	}
	secs := exhausted
	if secs < 0 && refused {
		secs = any
	}
	if secs <= 0 {
		return time.Time{}, true
	}
	return now.Add(time.Duration(min(secs, int64(maxServerPause/time.Second))) * time.Second), true
}

// FuzzAccept feeds the middleware Accept fields as a client may write them:
// a refusal's body is problem+json exactly when the reference says the
// client accepts it no less than application/json (RFC 9110's weights of
// the most specific matching media ranges), and a 400's exactly when it
// names problem+json with a weight that is not an RFC 9110 qvalue of 0.
func FuzzAccept(f *testing.F) {
	f.Add("application/problem+json", "")
	f.Add("text/html, application/problem+json;q=0.000", "application/json")
	f.Add("APPLICATION/PROBLEM+JSON ; Q=0.5", "")
	f.Add("application/problem+json;q=00", "application/problem+json;q=.0")
	f.Add("application/problem+json;q=0.0000, */*", "application/problem+json;charset=utf-8;q=0")
	f.Add("application/json;q=0.5, application/*;q=0.7", "*/*;q=0.6")
	f.Add("application/json;q=1.000, application/problem+json;q=1.", " , ")
	f.Add(strings.Repeat("application/problem+json;q=0,", 1<<12), strings.Repeat(";", 1<<12))
	lim := &scripted{}
	lim.set(keylimit.Result{Limit: 1, RetryAfter: time.Second}, keylimit.PerMinute(1))
	h := limited(f, httplimit.Config{
		Key:      func(*http.Request) (string, error) { return "k", nil },
		Policies: []quota.Policy{{Name: "minute", Limiter: lim}},
	})(&ok{})
	noKey := limited(f, httplimit.Config{
		Key:      httplimit.Header("X-Key"),
		Policies: []quota.Policy{{Name: "minute", Limiter: lim}},
	})(&ok{})
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		for _, refusal := range []bool{true, false} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header["Accept"] = []string{line1, line2}
			w := httptest.NewRecorder()
			want, status := "application/json", http.StatusBadRequest
			if refusal {
				h.ServeHTTP(w, r)
				status = http.StatusTooManyRequests
				if referenceAcceptsProblem(line1, line2) {
					want = "application/problem+json"
				}
			} else {
				noKey.ServeHTTP(w, r)
				if referenceNamesProblem(line1, line2) {
					want = "application/problem+json"
				}
			}
			require.Equal(t, status, w.Code)
			require.Equal(t, want, w.Header().Get("Content-Type"), "Accept %q, %q (status %d)", line1, line2, status)
			require.True(t, json.Valid(w.Body.Bytes()), "body %q", w.Body.String())
		}
	})
}

// qvalue is an RFC 9110 qvalue, in its two forms.
var qvalue = regexp.MustCompile(`^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$`)

// acceptElement is one element of an Accept field as the references read
// it: the media range, lower-cased, and its weight, in thousandths (1000
// when the first q parameter is not a qvalue).
type acceptElement struct {
	mediaRange string
	q          int
}

func acceptElements(lines ...string) []acceptElement {
	var out []acceptElement
	for _, line := range lines {
		for _, element := range strings.Split(line, ",") {
			parts := strings.Split(element, ";")
			e := acceptElement{mediaRange: strings.ToLower(strings.TrimSpace(parts[0])), q: 1000}
			switch e.mediaRange {
			case "":
				continue
			case "application/problem+json", "application/json", "application/*", "*/*":
			default:
				out = append(out, e) // a media range whose weight no reference reads
				continue
			}
			for _, p := range parts[1:] {
				name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
				if !strings.EqualFold(name, "q") {
					continue
				}
				if v := strings.TrimSpace(value); qvalue.MatchString(v) {
					f, _ := strconv.ParseFloat(strings.TrimSuffix(v, "."), 64)
					e.q = int(math.Round(f * 1000))
				}
				break
			}
			out = append(out, e)
		}
	}
	return out
}

// referenceWeight is the weight of mediaType among es: that of the first
// element naming it, else of the first application/*, else of the first
// */*, else 0.
func referenceWeight(es []acceptElement, mediaType string) int {
	for _, r := range []string{mediaType, "application/*", "*/*"} {
		for _, e := range es {
			if e.mediaRange == r {
				return e.q
			}
		}
	}
	return 0
}

// referenceAcceptsProblem: no media range at all accepts any; else
// problem+json's weight is above 0 and at least application/json's.
func referenceAcceptsProblem(lines ...string) bool {
	es := acceptElements(lines...)
	problem, json := referenceWeight(es, "application/problem+json"), referenceWeight(es, "application/json")
	return len(es) == 0 || problem > 0 && problem >= json
}

// referenceNamesProblem: the first element that names
// application/problem+json has a weight above 0.
func referenceNamesProblem(lines ...string) bool {
	for _, e := range acceptElements(lines...) {
		if e.mediaRange == "application/problem+json" {
			return e.q > 0
		}
	}
	return false
}

// FuzzFields feeds the field writer whatever a limiter may answer (a Redis
// reply included): any Result and any Limit. The fields it sends are always
// valid: RFC 9651 lists of Integers from 0 to 999,999,999,999,999, r at most
// q, Retry-After a whole number of seconds from 1 on when a refusal can
// pass, the legacy fields saying what RateLimit says (Reset as a Unix time).
func FuzzFields(f *testing.F) {
	f.Add(true, int64(10), int64(9), int64(0), int64(time.Second), 10, int64(time.Minute), 0)
	f.Add(false, int64(1<<62), int64(1<<62), int64(1<<62), int64(-1), -5, int64(-1), -1)
	f.Add(false, int64(-7), int64(-3), int64(-time.Second), int64(1<<63-1), 0, int64(0), 1<<40)
	f.Add(true, int64(5), int64(500), int64(0), int64(0), 1, int64(1<<62), 1<<62)
	f.Add(false, int64(1), int64(0), int64(keylimit.InfDuration), int64(0), 1, int64(time.Hour), 1)
	lim := &scripted{}
	now := clock.NewMock()
	now.Set(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC))
	h := limited(f, httplimit.Config{
		Key:          func(*http.Request) (string, error) { return "k", nil },
		Policies:     []quota.Policy{{Name: "p", Limiter: lim}},
		LegacyFields: true,
		Clock:        now,
	})(&ok{})
	f.Fuzz(func(t *testing.T, allowed bool, limit, remaining, retry, reset int64, events int, period int64, burst int) {
		lim.set(keylimit.Result{
			Allowed: allowed, Limit: int(limit), Remaining: int(remaining),
			RetryAfter: time.Duration(retry), ResetAfter: time.Duration(reset),
			RefillAfter: time.Duration(reset / 3), // at most ResetAfter, as a limiter's is
		}, keylimit.Limit{Events: events, Period: time.Duration(period), Burst: burst})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if allowed {
			require.Equal(t, http.StatusOK, w.Code)
		} else {
			require.Equal(t, http.StatusTooManyRequests, w.Code)
		}
		got := policyFields(t, w.Header()) // strict, every value from 0, r at most q
		require.Len(t, got, 1)
		for _, n := range []int64{got[0].q, got[0].w, got[0].r, got[0].t} {
			require.LessOrEqual(t, n, int64(999_999_999_999_999))
		}
		legacy := make([]int64, 3)
		for i, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			v := w.Header().Get(name)
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "%s %q", name, v)
			require.True(t, n >= 0 && n <= 999_999_999_999_999, "%s %q", name, v)
			legacy[i] = n
		}
		// X-RateLimit-Reset is the Unix time, rounded up, ResetAfter from
		// now: t's time of day, to the second or up to one later.
		r := max(reset, 0)
		wantReset := now.Now().Unix() + r/1e9 + (int64(now.Now().Nanosecond())+r%1e9+1e9-1)/1e9
		require.Equal(t, []int64{got[0].q, got[0].r, wantReset}, legacy, "the legacy fields say what RateLimit says")
		// t, RefillAfter at most w, is not after the quota is whole.
		require.LessOrEqual(t, got[0].t, legacy[2]-now.Now().Unix())
		require.LessOrEqual(t, got[0].t, got[0].w)
		// A refusal that can never pass (a quota below the cost of 1, or
		// RetryAfter InfDuration) has no Retry-After.
		if allowed || time.Duration(retry) == keylimit.InfDuration || limit < 1 {
			require.Empty(t, w.Header().Values("Retry-After"))
		} else {
			n := retryAfter(t, w.Header()) // a whole positive number
			require.LessOrEqual(t, n, 999_999_999_999_999)
			if remaining < 1 { // a policy the request exceeds: not before its t
				require.GreaterOrEqual(t, int64(n), got[0].t)
			}
		}
	})
}
