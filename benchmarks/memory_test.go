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

// TestMeasureMemoryCountsWhatIsKept calibrates MeasureMemory on limiters
// whose cost per key is known: 128 bytes, and 144 when the 16-byte key is
// kept too. A measurement that counted the dropped keys, or missed the kept
// ones, would be off by 16 bytes a key.
func TestMeasureMemoryCountsWhatIsKept(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	for _, tc := range []struct {
		keepKey bool
		want    float64
	}{{false, 128}, {true, 128 + KeyLen}} {
		m, err := MeasureMemory(retainerContender(tc.keepKey, false), n, true, 50*time.Millisecond, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(m.PerKey-tc.want) > 2 {
			t.Errorf("keepKey %v: %.1f bytes per key, want %.0f", tc.keepKey, m.PerKey, tc.want)
		}
		if m.Idle {
			t.Errorf("keepKey %v: measured after idle, but it cannot evict", tc.keepKey)
		}
	}
}

// TestMeasureMemoryWaitsForEviction checks the second measurement: a
// limiter that forgets everything one Period after it is built is measured
// at (nearly) nothing per key once its keys are idle.
func TestMeasureMemoryWaitsForEviction(t *testing.T) {
	m, err := MeasureMemory(retainerContender(true, true), 20_000, true, 50*time.Millisecond, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Idle || m.IdlePerKey > 1 || m.PerKey < 128 {
		t.Errorf("got %+v; want about 144 bytes a key, then under 1 once idle", m)
	}
}

// TestMeasureMemoryOfEveryContender runs the measurement on every
// contender at a modest size: each keeps at least the 8 bytes of state a
// key needs, and none keeps more after its keys went idle than before.
func TestMeasureMemoryOfEveryContender(t *testing.T) {
	n := 20_000
	for _, c := range Contenders() {
		t.Run(c.Name, func(t *testing.T) {
			m, err := MeasureMemory(c, n, true, 50*time.Millisecond, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%.1f bytes per key; idle %v: %.1f after %v", m.PerKey, m.Idle, m.IdlePerKey, m.IdleAfter)
			if m.PerKey < 8 {
				t.Errorf("%.1f bytes per key: less than one word of state", m.PerKey)
			}
			if m.Idle && m.IdlePerKey > m.PerKey+1 {
				t.Errorf("%.1f bytes per key once idle, more than the %.1f before", m.IdlePerKey, m.PerKey)
			}
		})
	}
}
