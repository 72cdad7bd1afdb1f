package benchmarks

import (
	"sync"
	"testing"
	"time"

	"github.com/keylimit/keylimit/internal/hotpath"
	"github.com/stretchr/testify/require"
)

// retainer is a limiter whose memory is known: each Allow keeps one node of
// exactly 128 bytes (a Go size class, so the heap spends no more), and the
// key too if keepKey is set (16 bytes, also a size class). After forget, it
// keeps nothing.
type retainer struct {
	mu      sync.Mutex // protects head
	head    *node
	keepKey bool
}

type node struct {
	next *node
	key  string
	_    [128 - 8 - 16]byte
}

func (r *retainer) Allow(key string) bool {
	n := &node{}
	if r.keepKey {
		n.key = key
	}
	r.mu.Lock()
	n.next, r.head = r.head, n
	r.mu.Unlock()
	return true
}

func (r *retainer) forget() {
	r.mu.Lock()
	r.head = nil
	r.mu.Unlock()
}

// retainerContender builds retainers; if evicts, each forgets everything
// one Period after it is built.
func retainerContender(keepKey, evicts bool) Contender {
	return Contender{Name: "retainer", Kind: Peer, Evicts: evicts, New: func(q Quota) (Limiter, error) {
		r := &retainer{keepKey: keepKey}
		if evicts {
			time.AfterFunc(q.Period, r.forget)
		}
		return r, nil
	}}
}

// TestHeapPerKeyCountsWhatIsKept calibrates HeapPerKey on limiters whose
// cost per key is known: 128 bytes, and 144 when the 16-byte key is kept
// too. A measurement that counted the dropped keys, or missed the kept ones,
// would be off by 16 bytes a key.
func TestHeapPerKeyCountsWhatIsKept(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		keepKey bool
		want    float64
	}{{false, 128}, {true, 128 + hotpath.KeyLen}} {
		got, err := HeapPerKey(retainerContender(tc.keepKey, false), n)
		require.NoError(t, err)
		require.InDelta(t, tc.want, got, 2, "keepKey %v: bytes per key", tc.keepKey)
	}
}

// TestHeapPerKeyOnceIdleWaitsForEviction checks the second measurement: a
// limiter that forgets everything one Period after it is built holds
// (nearly) nothing per key once its keys are idle, and one that never
// forgets still holds its 144 bytes.
func TestHeapPerKeyOnceIdleWaitsForEviction(t *testing.T) {
	const n = 20_000
	got, waited, err := HeapPerKeyOnceIdle(retainerContender(true, true), n, 250*time.Millisecond, 20*time.Second)
	require.NoError(t, err)
	require.Less(t, got, 1.0, "evicting: bytes per key after %v", waited)
	got, _, err = HeapPerKeyOnceIdle(retainerContender(true, false), n, 50*time.Millisecond, 5*time.Second)
	require.NoError(t, err)
	require.InDelta(t, 128+hotpath.KeyLen, got, 2, "not evicting: bytes per key once idle")
}

// TestHeapOfEveryContender runs both measurements on every contender at a
// modest size: each keeps at least the 8 bytes of state a key needs, and
// none that evicts keeps more once its keys went idle than before.
func TestHeapOfEveryContender(t *testing.T) {
	const n = 20_000
	for _, c := range Contenders() {
		t.Run(c.Name, func(t *testing.T) {
			held, err := HeapPerKey(c, n)
			require.NoError(t, err)
			require.GreaterOrEqual(t, held, 8.0, "bytes per key: at least one word of state")
			if !c.Evicts {
				return
			}
			idle, waited, err := HeapPerKeyOnceIdle(c, n, 50*time.Millisecond, 5*time.Second)
			require.NoError(t, err)
			require.LessOrEqual(t, idle, held+1, "bytes per key once idle (after %v), against %.1f before", waited, held)
		})
	}
}
