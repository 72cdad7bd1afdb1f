package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/httprate"
	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/httplimit"
	"github.com/keylimit/keylimit/internal/httpfloor"
	"github.com/keylimit/keylimit/quota"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"
)

// never is the quota of every limiting contender: a billion requests a
// second per client, which no round comes near, so that every request is
// admitted and what is measured is the cost of saying so.
const never = 1_000_000_000

// hello is the body of every response: a hello-world handler, which sets no
// header of its own, so that whatever a middleware adds is its cost.
var hello = []byte("Hello, World!\n")

// helloHandler is the bare handler every contender wraps.
var helloHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(hello) })

// contender is one way to serve helloHandler.
type contender struct {
	name string
	// wrap returns the handler served: helloHandler behind the contender's
	// middleware, keyed by the client's address, one policy of never a
	// second.
	wrap func(http.Handler) (http.Handler, error)
}

// contenders are the rows of the table, bare first: every ratio is to it.
var contenders = []contender{
	{"bare", func(h http.Handler) (http.Handler, error) { return h, nil }},
	{"keylimit-httplimit", func(h http.Handler) (http.Handler, error) {
		limit, err := httplimit.New(httplimit.Config{
			Key:      httplimit.ClientIP{}.Key,
			Policies: []quota.Policy{quota.Bucket("second", keylimit.PerSecond(never))},
		})
		if err != nil {
			return nil, err
		}
		return limit(h), nil
	}},
	// The same, with the fields sent on refusals only, so none here: the
	// decision alone.
	{"keylimit-fields-on-refusal", func(h http.Handler) (http.Handler, error) {
		limit, err := httplimit.New(httplimit.Config{
			Key:             httplimit.ClientIP{}.Key,
			Policies:        []quota.Policy{quota.Bucket("second", keylimit.PerSecond(never))},
			FieldsOnRefusal: true,
		})
		if err != nil {
			return nil, err
		}
		return limit(h), nil
	}},
	{"floor-two-fields", func(h http.Handler) (http.Handler, error) { return httpfloor.TwoFields(h), nil }},
	{"go-chi-httprate", func(h http.Handler) (http.Handler, error) {
		return httprate.LimitBy(never, time.Second, remoteIP)(h), nil
	}},
	{"ulule-limiter", func(h http.Handler) (http.Handler, error) {
		lim := limiter.New(memory.NewStore(), limiter.Rate{Period: time.Second, Limit: never})
		return stdlib.NewMiddleware(lim).Handler(h), nil
	}},
}

// remoteIP keys a request by the address it came from, as httplimit's
// ClientIP and ulule's default key do with no proxy trusted.
func remoteIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", err
	}
	return httprate.CanonicalizeIP(host), nil
}

// lookup returns the contender named name.
func lookup(name string) (contender, error) {
	for _, c := range contenders {
		if c.name == name {
			return c, nil
		}
	}
	return contender{}, fmt.Errorf("no contender is named %q", name)
}

// serve serves contender name on ln until ctx ends.
func serve(ctx context.Context, name string, ln net.Listener) error {
	c, err := lookup(name)
	if err != nil {
		return err
	}
	h, err := c.wrap(helloHandler)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
