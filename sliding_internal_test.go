package keylimit

import (
	"testing"

	"github.com/benbjohnson/clock"
)

// TestSlidingStateReadDetectsWriters pins the seqlock of slidingState: a
// lock-free read reports its snapshot consistent only if no writer ran
// while it read, so a refusal without the lock is always one state's.
func TestSlidingStateReadDetectsWriters(t *testing.T) {
	s, err := NewSlidingWindow[string](PerHour(3), WithClock(clock.NewMock()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.AllowN("k", 2)
	st := s.load("k")
	judge := func(pos uint64) slidingDecision { return s.judge(st, pos, s.clock.now(), 1, true) }

	if d, ok := st.read(judge); !ok || !d.ok || d.count != 2 {
		t.Fatalf("a quiet read = %+v, consistent %v; want consistent, allowed, 2 in the window", d, ok)
	}
	if _, ok := st.read(func(pos uint64) slidingDecision {
		d := judge(pos)
		st.mu.Lock()
		st.append(st.pos.Load(), s.clock.now(), 1) // an admission lands mid-read
		st.mu.Unlock()
		return d
	}); ok {
		t.Fatal("a read during which an admission landed reported itself consistent")
	}
	st.seq.Add(1) // a writer is mid-way
	if _, ok := st.read(judge); ok {
		t.Fatal("a read that began while a writer was mid-way reported itself consistent")
	}
	st.seq.Add(1)
	if d, ok := st.read(judge); !ok || d.ok || d.count != 3 {
		t.Fatalf("a quiet read = %+v, consistent %v; want consistent, refused, 3 in the window", d, ok)
	}
}
