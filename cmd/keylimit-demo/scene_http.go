package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/quota"
)

func init() {
	register(scene{order: 40, name: "http", title: "HTTP middleware over loopback: 429, Retry-After and the RateLimit fields", run: httpScene})
}

// httpScene serves the httplimit middleware on 127.0.0.1, on a free port,
// and drives it with a real http.Client as alice, bob and charlie: 8 rapid
// requests each against a bucket of 5 refilling 1 a second, then 8 more
// after 3 s. The demo's client plays the trusted proxy in front of the
// server, so each user's address travels in X-Forwarded-For; charlie
// forges the header's left part and rotates his IPv6 address within his
// /64, and is still one client.
func httpScene(w io.Writer) error {
	limit, err := httplimit.New(httplimit.Config{
		Key: httplimit.ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}.Key,
		Policies: []quota.Policy{
			quota.Bucket("burst", keylimit.PerSecond(1).WithBurst(5), keylimit.WithClock(demoClock)),
		},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := &http.Server{Handler: limit(hello), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + ln.Addr().String() + "/"

	users := []struct {
		name string
		addr func(i int) string // the X-Forwarded-For of request i
	}{
		{"alice", func(int) string { return "203.0.113.10" }},
		{"bob", func(int) string { return "203.0.113.20" }},
		{"charlie", func(i int) string { return fmt.Sprintf("6.6.6.%d, 2001:db8:c:0:%x::1", i, i+1) }},
	}
	send := func(xff string) (*http.Response, string, error) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, strings.TrimSpace(string(body)), err
	}

	fmt.Fprintln(w, "A server on 127.0.0.1 allows each client 5 requests, and one more each second")
	fmt.Fprintln(w, "(a token bucket), telling clients apart by IP address. The demo's client plays the")
	fmt.Fprintln(w, "proxy in front of it (127.0.0.1, trusted), which adds each user's address to")
	fmt.Fprintln(w, "X-Forwarded-For. charlie forges that field, putting 6.6.6.n in front, and rotates his")
	fmt.Fprintln(w, "IPv6 address within 2001:db8:c::/64 on every request.")
	var policy, refusal, refusalType string // a RateLimit-Policy, and a 429's body and its Content-Type, as seen
	explained := false
	fire := func() error {
		passed := map[string]int{}
		for _, u := range users {
			var codes, fields []string
			for i := range 8 {
				resp, body, err := send(u.addr(i))
				if err != nil {
					return err
				}
				codes = append(codes, fmt.Sprint(resp.StatusCode))
				if resp.StatusCode == http.StatusOK {
					passed[u.name]++
				}
				if i == 0 || i == 7 {
					f := "RateLimit: " + resp.Header.Get("RateLimit")
					if ra := resp.Header.Get("Retry-After"); ra != "" {
						f += "  Retry-After: " + ra
					}
					fields = append(fields, f)
				}
				policy = resp.Header.Get("RateLimit-Policy")
				if resp.StatusCode == http.StatusTooManyRequests {
					refusal, refusalType = body, resp.Header.Get("Content-Type")
				}
			}
			fmt.Fprintf(w, "  %-8s %s\n", u.name, strings.Join(codes, " "))
			fmt.Fprintf(w, "           first: %s\n           last:  %s\n", fields[0], fields[1])
			if !explained {
				fmt.Fprintln(w, "           (r: requests left; t: seconds until one more is back;")
				fmt.Fprintln(w, "            Retry-After, on a 429: seconds until the next request can pass)")
				explained = true
			}
		}
		// The scene's point: charlie's forging and rotating changed nothing.
		if c, a := passed["charlie"], passed["alice"]; c == a {
			fmt.Fprintf(w, "  charlie got %d through, as alice and bob did: forging the field and rotating his\n", c)
			fmt.Fprintln(w, "  address gained him nothing.")
		} else {
			fmt.Fprintf(w, "  charlie got %d through and alice %d: forging gained him %d.\n", c, a, c-a)
		}
		return nil
	}

	fmt.Fprintln(w, "\n8 rapid requests each (200 passed, 429 refused):")
	if err := fire(); err != nil {
		return err
	}
	if refusal == "" {
		return errors.New("no request was refused")
	}
	fmt.Fprintln(w, "  The server reads the address its trusted proxy added, the rightmost one, and counts")
	fmt.Fprintln(w, "  an IPv6 client by its /64 network, which one user holds whole.")
	fmt.Fprintf(w, "\nevery response: RateLimit-Policy: %s\n", policy)
	fmt.Fprintln(w, "  (q: the quota, in requests; w: seconds an empty bucket takes to fill up again)")
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(refusal), "  ", "  "); err != nil {
		return fmt.Errorf("a 429's body %q: %w", refusal, err)
	}
	fmt.Fprintf(w, "a 429's body (%s: the draft's problem type, RFC 9457):\n  %s\n", refusalType, indented.String())

	const wait = 3 * time.Second
	fmt.Fprintf(w, "\nwaiting %v: one token a second comes back...\n", wait)
	pause(wait)
	fmt.Fprintln(w, "\n8 rapid requests each again:")
	return fire()
}
