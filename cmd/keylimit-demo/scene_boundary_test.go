package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTourBoundary: 4 requests every 100 ms from 0.5 s before a window
// boundary to 0.5 s after, to three limiters of 10 a second. The fixed
// window admits 10 on each side (-500 to +225 ms: 20 in 0.7 s); the sliding
// window 10 in all (-500 to -275 ms), refusing after the boundary until
// -500 ms is a second old; the sliding counter 10, then one per 100 ms as
// the previous second's weight falls by a tenth (-500 to +400 ms).
func TestTourBoundary(t *testing.T) {
	want := oneScene("The window boundary: fixed window, sliding window and sliding counter on the same requests", `Limit 10 a second; one client sends 4 requests every 100 ms, from 0.5 s before a window
boundary (a whole second, where a fixed window starts counting again) to 0.5 s after.
(# admitted, . refused)

  time      fixed    sliding  counter
  -500ms    ####     ####     ####
  -400ms    ####     ####     ####
  -300ms    ##..     ##..     ##..
  -200ms    ....     ....     ....
  -100ms    ....     ....     ....
  ---------- window boundary ----------
  +0ms      ####     ....     ....
  +100ms    ####     ....     #...
  +200ms    ##..     ....     #...
  +300ms    ....     ....     #...
  +400ms    ....     ....     #...

  fixed:   20 in 0.7 s: 100% over 10/s. Each window counts only its own:
           10 just before the boundary, 10 just after.
  sliding: 10 in 0.2 s: within 10/s. After the boundary it answers retry-after 500ms:
           then the first admission is a second old, and a request can pass again.
  counter: 14 in 0.9 s: 40% over 10/s. It keeps two counts, not a log of times:
           it takes the previous second's 10 as spread evenly over it, so after
           the boundary it lets one in every 100 ms.
`)
	require.Equal(t, want, tourOf(t, "boundary"))
}
