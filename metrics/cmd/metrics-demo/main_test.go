package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo, a real server and client on 127.0.0.1, on a mock
// clock that moves by itself when the demo waits, and checks its whole
// output. alice's first 8 requests meet "second"'s burst of 5; 1 s later
// "second" is full again, but "minute" has 3 of its 8 left (it refills one
// every 7.5 s). An admitted request counts under the policy with the
// fewest left: "second" until alice's second round, "minute" in it.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, autoClock{clock.NewMock()}))
	require.Equal(t, `A server on 127.0.0.1 limits / per API key with two policies, "second" (5 at once,
5 a second) and "minute" (8 a minute), and serves /metrics beside it, unlimited:
metrics.NewHTTP counts the middleware's decisions, metrics.NewStats reads each limiter.

  alice sends 8 rapid requests: 5 passed, refused 3 by "second" (429)
  bob sends 3: 3 passed
  1s later, alice sends 8 more: 3 passed, refused 5 by "minute" (429)

GET /metrics, the lines that matter:
  keylimit_http_decision_seconds_count{limiter="api",tier=""} 19
  keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="minute",tier=""} 3
  keylimit_http_decisions_total{limiter="api",outcome="allowed",policy="second",tier=""} 8
  keylimit_http_decisions_total{limiter="api",outcome="refused",policy="minute",tier=""} 5
  keylimit_http_decisions_total{limiter="api",outcome="refused",policy="second",tier=""} 3
  keylimit_keys{limiter="minute"} 2
  keylimit_keys{limiter="second"} 2
  (and 22 more keylimit lines: the histogram's buckets and sum, evicted and untracked keys)

11 allowed and 8 refused, 19 decisions timed in the histogram: what the clients saw.
Each decision counts under its binding policy: for a refusal, the one that refused; for
a pass, the one closest to refusing. 2 keys in each limiter, alice and bob; a key is
never a label, since a series per client would grow without bound.
`, out.String())
}

// autoClock is a mock clock that lets time pass by itself whenever someone
// waits on it: a Timer of d moves the clock d forward at once.
type autoClock struct{ *clock.Mock }

func (c autoClock) Timer(d time.Duration) *clock.Timer {
	t := c.Mock.Timer(d)
	c.Mock.Add(d)
	return t
}
