package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourHTTP runs the HTTP scene, a real server and client on loopback,
// on the mock clock. Each user gets the bucket's 5, then 429s; charlie,
// who forges X-Forwarded-For and rotates his address within his /64, gets
// no more. RateLimit's t is the time until the bucket is full (5 s after
// the 5th request), Retry-After the time until one token is back (1 s).
func TestTourHTTP(t *testing.T) {
	// users is a round of 8 requests for bob and charlie, whose lines are
	// alice's without the explanation.
	users := func(codes, first, last string) string {
		var b strings.Builder
		for _, u := range []string{"bob     ", "charlie "} {
			b.WriteString("  " + u + " " + codes + "\n")
			b.WriteString("           first: RateLimit: " + first + "\n")
			b.WriteString("           last:  RateLimit: " + last + "\n")
		}
		return b.String()
	}
	want := oneScene("HTTP middleware over loopback: 429, Retry-After and the RateLimit fields", `A server on 127.0.0.1 allows each client 5 requests, and one more each second
(a token bucket), telling clients apart by IP address. The demo's client plays the
proxy in front of it (127.0.0.1, trusted), which adds each user's address to
X-Forwarded-For. charlie forges that field, putting 6.6.6.n in front, and rotates his
IPv6 address within 2001:db8:c::/64 on every request.

8 rapid requests each (200 passed, 429 refused):
  alice    200 200 200 200 200 429 429 429
           first: RateLimit: "burst";r=4;t=1
           last:  RateLimit: "burst";r=0;t=1  Retry-After: 1
           (r: requests left; t: seconds until one more is back;
            Retry-After, on a 429: seconds until the next request can pass)
`+users("200 200 200 200 200 429 429 429", `"burst";r=4;t=1`, `"burst";r=0;t=1  Retry-After: 1`)+
		`  charlie got 5 through, as alice and bob did: forging the field and rotating his
  address gained him nothing.
  The server reads the address its trusted proxy added, the rightmost one, and counts
  an IPv6 client by its /64 network, which one user holds whole.

every response: RateLimit-Policy: "burst";q=5;w=5
  (q: the quota, in requests; w: seconds an empty bucket takes to fill up again)
a 429's body (application/problem+json: the draft's problem type, RFC 9457):
  {
    "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
    "title": "Quota Exceeded",
    "status": 429,
    "detail": "rate limit exceeded",
    "violated-policies": [
      "burst"
    ],
    "retry_after_seconds": 1,
    "policy": "burst",
    "limit": 5,
    "remaining": 0
  }

waiting 3s: one token a second comes back...

8 rapid requests each again:
  alice    200 200 200 429 429 429 429 429
           first: RateLimit: "burst";r=2;t=1
           last:  RateLimit: "burst";r=0;t=1  Retry-After: 1
`+users("200 200 200 429 429 429 429 429", `"burst";r=2;t=1`, `"burst";r=0;t=1  Retry-After: 1`)+
		`  charlie got 3 through, as alice and bob did: forging the field and rotating his
  address gained him nothing.
`)
	require.Equal(t, want, tourOf(t, "http"))
}
