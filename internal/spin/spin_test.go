package spin

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBackoffWaits: each wait of one call lasts at least half its bound,
// which doubles from First up to Most and stays there.
func TestBackoffWaits(t *testing.T) {
	var b Backoff
	want := []int64{256, 512, 1024, 2048, 4096, 4096, 4096}
	for i, bound := range want {
		start := time.Now()
		b.Wait()
		require.Equal(t, bound, b.bound, "wait %d: its bound", i)
		require.GreaterOrEqual(t, time.Since(start), time.Duration(bound/2), "wait %d: how long it waited", i)
	}
}
