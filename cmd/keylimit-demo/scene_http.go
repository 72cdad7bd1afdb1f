package main

import (
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
		Policies: []httplimit.Policy{
			httplimit.Bucket("burst", keylimit.PerSecond(1).WithBurst(5), keylimit.WithClock(demoClock)),
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

	fmt.Fprintln(w, "server on 127.0.0.1, a free port; keyed by client IP, 127.0.0.1 trusted as the proxy")
	fmt.Fprintln(w, "charlie forges X-Forwarded-For (6.6.6.n, ...) and rotates his IPv6 address in 2001:db8:c::/64")
	var policy, refusal string // a RateLimit-Policy and a 429's body, as seen
	fire := func() error {
		for _, u := range users {
			var codes, fields []string
			for i := range 8 {
				resp, body, err := send(u.addr(i))
				if err != nil {
					return err
				}
				codes = append(codes, fmt.Sprint(resp.StatusCode))
				if i == 0 || i == 7 {
					f := "RateLimit: " + resp.Header.Get("RateLimit")
					if ra := resp.Header.Get("Retry-After"); ra != "" {
						f += "  Retry-After: " + ra
					}
					fields = append(fields, f)
				}
				policy = resp.Header.Get("RateLimit-Policy")
				if resp.StatusCode == http.StatusTooManyRequests {
					refusal = body
				}
			}
			fmt.Fprintf(w, "  %-8s %s\n", u.name, strings.Join(codes, " "))
			fmt.Fprintf(w, "           first: %s\n           last:  %s\n", fields[0], fields[1])
		}
		return nil
	}

	fmt.Fprintln(w, "\n8 rapid requests each:")
	if err := fire(); err != nil {
		return err
	}
	if refusal == "" {
		return errors.New("no request was refused")
	}
	fmt.Fprintf(w, "\nevery response: RateLimit-Policy: %s\n", policy)
	fmt.Fprintf(w, "a 429's body: %s\n", refusal)

	const wait = 3 * time.Second
	fmt.Fprintf(w, "\nwaiting %v: one token a second comes back...\n", wait)
	pause(wait)
	fmt.Fprintln(w, "\n8 rapid requests each again:")
	return fire()
}
