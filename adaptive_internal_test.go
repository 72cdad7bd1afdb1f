package keylimit

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The hold record keeps its size with its kind (in the padding), so a
// Concurrency's key state stays one cache line; an Adaptive's key state is
// pinned at its size.
func TestHoldSizes(t *testing.T) {
	require.Equal(t, uintptr(40), unsafe.Sizeof(hold{}))
	require.Equal(t, uintptr(64), unsafe.Sizeof(concState{}))
	// An Adaptive's key: its held slots, when it last released one and its
	// place among the recent keys (for the slots kept for it), and its
	// control (limit, window, refusals and last peak, estimate, the fold's
	// mutex).
	require.Equal(t, uintptr(136), unsafe.Sizeof(adState{}))
}

// The room of each criticality under a limit, and the ceiling: Critical's
// is three times the limit, the hard bound (was a quarter more: critical work was refused while
// the server had room), within the ceiling.
func TestCriticalityRoom(t *testing.T) {
	for _, c := range []struct {
		crit           Criticality
		limit, ceiling int64
		want           int64
	}{
		{Sheddable, 20, 100, 15}, {Default, 20, 100, 20}, {Critical, 20, 100, 60},
		{Sheddable, 1, 100, 1}, {Critical, 1, 100, 3}, {Critical, 3, 100, 9},
		{Critical, 20, 22, 22}, {Critical, 20, 59, 59}, {Critical, 20, 20, 20}, {Criticality(9).valid(), 20, 100, 20},
	} {
		require.Equal(t, c.want, c.crit.room(c.limit, c.ceiling), "%d under %d, ceiling %d", c.crit, c.limit, c.ceiling)
	}
}
