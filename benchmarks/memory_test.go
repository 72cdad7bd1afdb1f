package benchmarks

import (
	"math"
	"sync"
	"testing"
	"time"
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
	c := Contender{Name: "retainer", Kind: Peer}
	c.New = func(q Quota) (Limiter, error) {
		r := &retainer{keepKey: keepKey}
		if evicts {
			time.AfterFunc(q.Period, r.forget)
		}
		return r, nil
	}
	if evicts {
		c.Evicts = "all keys, one Period after it is built"
	}
	return c
}

// TestHeapPerKeyCountsWhatIsKept calibrates HeapPerKey on limiters whose
// cost per key is known: 128 bytes, and 144 when the 16-byte key is kept
// too. A measurement that counted the dropped keys, or missed the kept ones,
// would be off by 16 bytes a key.
func TestHeapPerKeyCountsWhatIsKept(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	for _, tc := range []struct {
		keepKey bool
		want    float64
	}{{false, 128}, {true, 128 + KeyLen}} {
		got, err := HeapPerKey(retainerContender(tc.keepKey, false), n)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tc.want) > 2 {
			t.Errorf("keepKey %v: %.1f bytes per key, want %.0f", tc.keepKey, got, tc.want)
		}
	}
}

// TestHeapPerKeyOnceIdleWaitsForEviction checks the second measurement: a
// limiter that forgets everything one Period after it is built holds
// (nearly) nothing per key once its keys are idle, and one that never
// forgets still holds its 144 bytes.
func TestHeapPerKeyOnceIdleWaitsForEviction(t *testing.T) {
	const n = 20_000
	got, waited, err := HeapPerKeyOnceIdle(retainerContender(true, true), n, 50*time.Millisecond, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got > 1 {
		t.Errorf("evicting: %.1f bytes per key after %v; want under 1", got, waited)
	}
	got, _, err = HeapPerKeyOnceIdle(retainerContender(true, false), n, 50*time.Millisecond, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-(128+KeyLen)) > 2 {
		t.Errorf("not evicting: %.1f bytes per key once idle; want 144", got)
	}
}

// TestHeapOfEveryContender runs both measurements on every contender at a
// modest size: each keeps at least the 8 bytes of state a key needs, and
// none that evicts keeps more once its keys went idle than before.
func TestHeapOfEveryContender(t *testing.T) {
	const n = 20_000
	for _, c := range Contenders() {
		t.Run(c.Name, func(t *testing.T) {
			held, err := HeapPerKey(c, n)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%.1f bytes per key", held)
			if held < 8 {
				t.Errorf("%.1f bytes per key: less than one word of state", held)
			}
			if c.Evicts == "" {
				return
			}
			idle, waited, err := HeapPerKeyOnceIdle(c, n, 50*time.Millisecond, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%.1f bytes per key once idle, after %v", idle, waited)
			if idle > held+1 {
				t.Errorf("%.1f bytes per key once idle, more than the %.1f before", idle, held)
			}
		})
	}
}
