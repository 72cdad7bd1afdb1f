package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourRetry runs the retry scene on the mock clock, where every number
// it prints is exact. The misbehaving loop alone is refused twice for each
// of the 5 calls past the partner's burst (tries at +0 and +100 ms, passes
// at +200 ms). Through a Transport it is never refused: the partner's 5th
// answer says RateLimit r=0;t=1, so the Transport holds the 6th call until
// the bucket is full again at 1 s; with the Transport's own 5/s the calls
// go evenly 200 ms apart.
func TestTourRetry(t *testing.T) {
	want := oneScene("A retry loop that hammers a partner, with and without httplimit.Transport", `A partner allows 5 requests a second. A client has 10 calls to make, and on a
429 it tries again every 100ms, whatever the server says.

  without the Transport:
      10 calls in 1s; 20 requests sent, 10 refused with a 429: 50% wasted
  with the Transport, reading the partner's fields:
      10 calls in 1s; 10 requests sent, none refused
  with the Transport, and 5/s of its own:
      10 calls in 1.8s; 10 requests sent, none refused

Retrying every 100ms made the loop no faster than the Transport: it only sent
the partner 10 more requests to refuse.

The Transport reads the partner's answers: after the 5th call the RateLimit field
said r=0 (none left), so it held the 6th, for every caller sharing it, until the quota
was back; a 429's Retry-After does the same. With a limit of its own, it also spreads
the calls over the second.
`)
	require.Equal(t, want, tourOf(t, "retry"))
}
