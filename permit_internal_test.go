package keylimit

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The hold record keeps its size with its kind (in the padding), so a
// Concurrency's key state stays one cache line.
func TestHoldSizes(t *testing.T) {
	require.Equal(t, uintptr(40), unsafe.Sizeof(hold{}))
	require.Equal(t, uintptr(64), unsafe.Sizeof(concState{}))
}
