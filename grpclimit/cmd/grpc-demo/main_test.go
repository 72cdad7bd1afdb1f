package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo, a real server and real clients on 127.0.0.1, on a
// mock clock that moves by itself whenever a client waits, and checks its
// whole output. The plain client's 6th call is refused with the bucket's
// delay for one token, 200 ms; retrying every 50 ms, it is refused 4 times
// for each call past the burst; through grpclimit.Client, once (the Client
// holds the retry until the token is back); with the Client's own 5/s and a
// burst of 4, never, and the calls after the 4th go 200 ms apart.
func TestDemo(t *testing.T) {
	mock := clock.NewMock()
	// Far ahead: gRPC sends the calls' deadlines, set on this clock, as
	// real time left.
	mock.Set(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	var out bytes.Buffer
	require.NoError(t, run(&out, autoClock{mock}))
	require.Equal(t, `A gRPC server on 127.0.0.1 (the standard health service) allows each API key 5 calls
a second: 5 at once, then one every 200ms (a token bucket behind grpclimit's interceptors).

A plain client calls 8 times in a row as "alice":
  OK OK OK OK OK ResourceExhausted ResourceExhausted ResourceExhausted
  5 passed, 3 refused: the limit, exactly.
  every admitted call carries the RateLimit fields as header metadata; the 1st:
      ratelimit-policy: "second";q=5;w=1  ratelimit: "second";r=4;t=1
  the 6th, refused: ResourceExhausted, with a RetryInfo detail: retry in 200ms
      trailer metadata  ratelimit: "second";r=0;t=1  retry-after: 1  grpc-retry-pushback-ms: 200
      and no header: a Trailers-Only answer, the refusal gRPC's own retry policy retries
  (q: the quota; w: seconds an empty bucket takes to fill; r: calls left; t: seconds
   until one more is back; retry-after: RetryInfo's delay in whole seconds, rounded up)

Each client below has 8 calls to make, and sends a refused one again until it passes:
  a plain client, trying again every 50ms ("bob"):
      8 calls in 600ms; 20 sent, 12 refused: 60% wasted
      retried 50ms after a refusal, before RetryInfo's 200ms: 9 of 12 retries refused
  grpclimit.Client, which waits out the server's RetryInfo delay ("carol"):
      8 calls in 600ms; 11 sent, 3 refused: 27% wasted
      retried 200ms after a refusal, not before RetryInfo's 200ms: 0 of 3 retries refused
  grpclimit.Client with a limit of its own, 5/s with a burst of 4 ("dave"):
      8 calls in 800ms; 8 sent, none refused

grpclimit.Client reads each refusal's RetryInfo and holds the retry, and every other call
sharing the Client, until the delay has passed. With a limit of its own, one call under
the server's burst (a margin for the network's jitter), it spaces the calls to the
server's rate.
`, out.String())
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 6: "6th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 111: "111th"} {
		require.Equal(t, want, ordinal(n), "ordinal(%d)", n)
	}
}

// autoClock is a mock clock that lets time pass by itself whenever someone
// waits on it: a Timer of d moves the clock d forward at once. The demo's
// clients wait one at a time, so it runs on exact simulated time, at once.
type autoClock struct{ *clock.Mock }

func (c autoClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.Mock.Add(d)
	return t
}
