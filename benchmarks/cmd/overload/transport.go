package main

import (
	"net/http"

	"github.com/keylimit/keylimit/httplimit"
)

// newTransport is the client's Transport: httplimit's, as a client would
// configure it against a partner that may fail.
func newTransport(_ clientConfig, base http.RoundTripper) http.RoundTripper {
	return &httplimit.Transport{Base: base}
}
