package main

import (
	"net/http"

	"github.com/keylimit/keylimit/httplimit"
)

// newTransport is the client's Transport: httplimit's, throttling
// adaptively with cc's K and window.
func newTransport(cc clientConfig, base http.RoundTripper) http.RoundTripper {
	return &httplimit.Transport{Base: base, Throttle: float64(cc.k), ThrottleWindow: cc.window}
}
