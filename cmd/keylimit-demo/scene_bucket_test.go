package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourBucket: a bucket of 5 refilling 1 a second. 8 rapid requests
// each: 5 pass, and the last refusal waits 1 s for a token and 5 s for all
// of them. 3 s later each user has 3 tokens, 2 s short of full; 8 more
// requests: 3 pass.
func TestTourBucket(t *testing.T) {
	want := oneScene("Three users, one token bucket each: capacity 5, refilling 1 a second", `Each user's bucket holds 5 tokens; a request takes one, and one comes back each second.

8 rapid requests each (ok accepted, no refused):
  alice    ok ok ok ok ok no no no   had 5 tokens: 5 accepted, 3 refused
           then remaining=0 retry-after=1s reset-after=5s
           (retry-after: until the next request can pass, one token back;
            reset-after: until the bucket is full again, all 5 back)
  bob      ok ok ok ok ok no no no   had 5 tokens: 5 accepted, 3 refused
           then remaining=0 retry-after=1s reset-after=5s
  charlie  ok ok ok ok ok no no no   had 5 tokens: 5 accepted, 3 refused
           then remaining=0 retry-after=1s reset-after=5s

waiting 3s: one token a second comes back...
  alice    remaining=3 reset-after=2s: 3 tokens back in 3s, full again 2s later
  bob      remaining=3 reset-after=2s: 3 tokens back in 3s, full again 2s later
  charlie  remaining=3 reset-after=2s: 3 tokens back in 3s, full again 2s later

8 rapid requests each again:
  alice    ok ok ok no no no no no   had 3 tokens: 3 accepted, 5 refused
           then remaining=0 retry-after=1s reset-after=5s
  bob      ok ok ok no no no no no   had 3 tokens: 3 accepted, 5 refused
           then remaining=0 retry-after=1s reset-after=5s
  charlie  ok ok ok no no no no no   had 3 tokens: 3 accepted, 5 refused
           then remaining=0 retry-after=1s reset-after=5s
`)
	require.Equal(t, want, tourOf(t, "bucket"))
}
