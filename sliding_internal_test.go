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
	var d slidingDecision
	now := s.clock.now()

	if ok := st.cfg.arith.judgeSnapshot(st, now, 1, true, &d); !ok || !d.ok || d.count != 2 {
		t.Fatalf("a quiet read = %+v, consistent %v; want consistent, allowed, 2 in the window", d, ok)
	}
	seq, _, ok := st.snapshot()
	if !ok {
		t.Fatal("a quiet state refused a snapshot")
	}
	st.mu.Lock()
	st.append(st.pos.Load(), now, 1) // an admission lands mid-read
	st.mu.Unlock()
	if st.unchanged(seq) {
		t.Fatal("a read during which an admission landed reported itself consistent")
	}
	seq, _, _ = st.snapshot()
	s.Refund("k", 1)
	if st.unchanged(seq) {
		t.Fatal("a read during which a Refund landed reported itself consistent")
	}
	s.Allow("k")

	st.seq.Add(1) // a writer is mid-way
	if _, _, ok := st.snapshot(); ok {
		t.Fatal("a read that began while a writer was mid-way was allowed")
	}
	if st.cfg.arith.judgeSnapshot(st, now, 1, true, &d) {
		t.Fatal("a judgement that began while a writer was mid-way reported itself consistent")
	}
	st.seq.Add(1)
	if ok := st.cfg.arith.judgeSnapshot(st, now, 1, true, &d); !ok || d.ok || d.count != 3 {
		t.Fatalf("a quiet read = %+v, consistent %v; want consistent, refused, 3 in the window", d, ok)
	}
	st.retire()
	if st.cfg.arith.judgeSnapshot(st, now, 1, true, &d) {
		t.Fatal("a read of a retired state reported itself a decision")
	}
}
