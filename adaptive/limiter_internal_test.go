package adaptive

import (
	"testing"
	"unsafe"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// A key's state is pinned at its size: its held slots, when it last
// released one and its place among the recent keys (for the slots kept for
// it), and its control (limit, window, refusals and last peak, estimate,
// the fold's mutex).
func TestStateSize(t *testing.T) {
	require.Equal(t, uintptr(136), unsafe.Sizeof(adState{}))
}

// The room of each criticality under a limit, and the ceiling: Critical's
// is three times the limit, the hard bound (was a quarter more: critical work was refused while
// the server had room), within the ceiling.
func TestCriticalityRoom(t *testing.T) {
	for _, c := range []struct {
		crit           keylimit.Criticality
		limit, ceiling int64
		want           int64
	}{
		{keylimit.Sheddable, 20, 100, 15}, {keylimit.Default, 20, 100, 20}, {keylimit.Critical, 20, 100, 60},
		{keylimit.Sheddable, 1, 100, 1}, {keylimit.Critical, 1, 100, 3}, {keylimit.Critical, 3, 100, 9},
		{keylimit.Critical, 20, 22, 22}, {keylimit.Critical, 20, 59, 59}, {keylimit.Critical, 20, 20, 20},
		// A criticality from outside the three constants is Default (see
		// TestCriticalityOf, in package keylimit, for WithCriticality's).
		{keylimit.CriticalityOf(keylimit.WithCriticality(t.Context(), 9)), 20, 100, 20},
	} {
		require.Equal(t, c.want, room(c.crit, c.limit, c.ceiling), "%d under %d, ceiling %d", c.crit, c.limit, c.ceiling)
	}
}
