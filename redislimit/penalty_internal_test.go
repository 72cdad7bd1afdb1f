package redislimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzPenaltyMessages: what a penalty reads from Redis, an announcement on
// a channel anyone may publish on and the script's reply, is taken only in
// its own form and otherwise ignored, never a panic, never a ban longer
// than 2^60 ns or a negative one. An announcement gives a key and a limit
// only, never a length, and queuing what it names holds at most maxHints
// keys of maxHintBytes.
func FuzzPenaltyMessages(f *testing.F) {
	f.Add("3600000000 5 abc k")
	f.Add("1 0 x a key with spaces")
	f.Add("0 0 x k")
	f.Add("-5 1 x k")
	f.Add("99999999999999999999 1 x k")
	f.Add("1 0 1")
	f.Add("0 0 0")
	f.Add("1 3600000000 1")
	var h banHints
	h.init()
	f.Fuzz(func(t *testing.T, s string) {
		if origin, key, ok := parseHint(s); ok {
			require.NotContains(t, origin, " ")
			f := strings.SplitN(s, " ", 3)
			limit, err := strconv.Atoi(f[1])
			require.NoError(t, err, "a hint's limit is checked for its form")
			require.GreaterOrEqual(t, limit, 0)
			o2, k2, ok := parseHint(fmt.Sprintf("%s %s %s %s", f[0], f[1], origin, key))
			require.True(t, ok)
			require.Equal(t, []string{origin, key}, []string{o2, k2})
			h.add(key)
			h.mu.Lock()
			require.LessOrEqual(t, len(h.keys), maxHints)
			require.LessOrEqual(t, h.bytes, maxHintBytes)
			require.Len(t, h.queued, len(h.keys))
			h.mu.Unlock()
		}
		if left, started, ok := parseRefusal(s); ok {
			require.GreaterOrEqual(t, left, time.Duration(0))
			require.LessOrEqual(t, left, time.Duration(maxSpan))
			require.False(t, started && s[0] == '0', "a ban started by a refusal that is no ban")
		}
	})
}

// TestBanHintsAreBounded: a flood of hints, each of another key, queues
// maxHints of them and drops the rest, counted; a key named again while
// it waits is queued once; a long key that does not fit is dropped.
func TestBanHintsAreBounded(t *testing.T) {
	var h banHints
	h.init()
	for i := range 3 * maxHints {
		h.add("k" + strconv.Itoa(i))
		h.add("k0")
	}
	require.Equal(t, uint64(2*maxHints), h.dropped.Load(), "hints dropped")
	keys := h.take()
	require.Len(t, keys, maxHints)
	require.Equal(t, "k0", keys[0], "the first hint of k0, queued once")
	require.Equal(t, "k1023", keys[maxHints-1])
	require.Empty(t, h.take(), "taken")

	h.add(strings.Repeat("k", maxHintBytes))
	h.add("k") // no room left
	require.Equal(t, uint64(2*maxHints+1), h.dropped.Load(), "hints dropped")
	require.Len(t, h.take(), 1)
}
