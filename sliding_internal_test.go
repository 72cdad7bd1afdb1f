package keylimit

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/stretchr/testify/require"
)

// TestSlidingStateReadDetectsWriters pins the seqlock of slidingState: a
// lock-free read reports its snapshot consistent only if no writer ran
// while it read, so a refusal without the lock is always one state's.
func TestSlidingStateReadDetectsWriters(t *testing.T) {
	s, err := NewSlidingWindow[string](PerHour(3), WithClock(clock.NewMock()))
	require.NoError(t, err, "NewSlidingWindow")
	defer s.Close()
	_, adm := s.Admit("k", 2)
	st := s.keys.load("k")
	d := slidingDecision{report: true}
	now := s.keys.clock.now()

	ok := st.cfg.arith.judgeSnapshot(st, now, 1, &d)
	require.True(t, ok, "a quiet read %+v: consistent", d)
	require.True(t, d.ok, "a quiet read %+v: allowed", d)
	require.Equal(t, 2, d.count, "a quiet read %+v: events in the window", d)
	seq, _, ok := st.snapshot()
	require.True(t, ok, "a quiet state's snapshot: allowed")
	next := st.lock()
	st.append(st.pos.Load(), now, 1) // an admission lands mid-read
	st.unlock(next)
	require.False(t, st.unchanged(seq), "a read during which an admission landed: reported itself consistent")
	seq, _, _ = st.snapshot()
	one := adm
	one.N = 1
	s.Refund("k", one)
	require.False(t, st.unchanged(seq), "a read during which a Refund landed: reported itself consistent")
	s.Allow("k")

	st.seq.Add(1) // a writer is mid-way
	_, _, ok = st.snapshot()
	require.False(t, ok, "a read that began while a writer was mid-way: allowed")
	require.False(t, st.cfg.arith.judgeSnapshot(st, now, 1, &d), "a judgement that began while a writer was mid-way: reported itself consistent")
	st.seq.Add(1)
	ok = st.cfg.arith.judgeSnapshot(st, now, 1, &d)
	require.True(t, ok, "a quiet read %+v: consistent", d)
	require.False(t, d.ok, "a quiet read %+v: allowed", d)
	require.Equal(t, 3, d.count, "a quiet read %+v: events in the window", d)
	st.retire()
	require.False(t, st.cfg.arith.judgeSnapshot(st, now, 1, &d), "a read of a retired state: reported itself a decision")
}

// TestSlidingWindowLogFollowsTheLimit pins how a change of Events resizes a
// key's log, and the phantoms that a smaller log keeps of the entries it
// has no room for.
func TestSlidingWindowLogFollowsTheLimit(t *testing.T) {
	clk := newTestClock()
	s, err := NewSlidingWindow[string](PerHour(10), WithClock(clk), WithEvictionInterval(0))
	require.NoError(t, err, "NewSlidingWindow")
	defer s.Close()
	// log returns k's log, oldest first, and its phantoms, after moving
	// it to the current limit.
	log := func() (entries []time.Duration, phantoms int) {
		s.Peek("k")
		st := s.keys.load("k")
		head, phantoms, size := unpackPos(st.pos.Load())
		for i := range size {
			entries = append(entries, time.Duration(st.log[(head-size+i+len(st.log))%len(st.log)].Load()))
		}
		require.Len(t, st.log, st.cfg.arith.events, "the log's slots under %d events", st.cfg.arith.events)
		return entries, phantoms
	}
	expect := func(what string, gotEntries []time.Duration, gotPhantoms int, wantEntries []time.Duration, wantPhantoms int) {
		t.Helper()
		require.Equal(t, fmt.Sprint(wantEntries), fmt.Sprint(gotEntries), "%s: entries", what)
		require.Equal(t, wantPhantoms, gotPhantoms, "%s: phantoms", what)
	}
	repeat := func(d time.Duration, n int) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }

	var last [2]Admission // of the admissions at 8 s and 9 s
	for i := range 10 {
		_, a := s.Admit("k", 1)
		if i >= 8 {
			last[i-8] = a
		}
		if i < 9 {
			clk.Add(time.Second)
		}
	} // entries at 0 s, 1 s, ... 9 s
	s.SetLimit(PerHour(3))
	e, p := log()
	expect("shrunk to 3", e, p, []time.Duration{7 * time.Second, 8 * time.Second, 9 * time.Second}, 7)

	// A refund from a log with phantoms keeps it full: 2 phantoms take the
	// freed slots, at the oldest entry's time.
	s.Refund("k", last[1])
	s.Refund("k", last[0])
	e, p = log()
	expect("refunded 2", e, p, repeat(7*time.Second, 3), 5)

	// Grown to 20: the 5 phantoms come back, at 7 s, before the 3 entries.
	s.SetLimit(PerHour(20))
	e, p = log()
	expect("grown to 20", e, p, repeat(7*time.Second, 8), 0)
	require.Equal(t, 12, s.Peek("k").Remaining, "Remaining, 10 admitted and 2 refunded")

	// Shrunk again, then an admission that overwrites the oldest entries,
	// which have left the window: the phantoms, older, are forgotten.
	s.SetLimit(PerHour(2))
	e, p = log()
	expect("shrunk to 2", e, p, repeat(7*time.Second, 2), 6)
	clk.Add(time.Hour)
	require.True(t, s.Allow("k"), "Allow an hour later")
	// Grown to 5: the entry of 7 s, out of the window, is not kept.
	s.SetLimit(PerHour(5))
	e, p = log()
	expect("an admission later, grown to 5", e, p, []time.Duration{time.Hour + 9*time.Second}, 0)
	require.Equal(t, 4, s.Peek("k").Remaining, "Remaining after one admission in the window of 5")
}

// TestSlidingLockWaitsForItsHolder: admissions wait for the writer that
// holds the key's lock, however long it holds it (past holderOff, when the
// waiters park), and the release wakes every one: parkMost is an hour
// here, so a lost wake would hang them. Two of the 16 are admitted.
func TestSlidingLockWaitsForItsHolder(t *testing.T) {
	defer parkMost.Store(parkMost.Swap(int64(time.Hour)))
	s, err := NewSlidingWindow[string](PerHour(3), WithClock(clock.NewMock()))
	require.NoError(t, err, "NewSlidingWindow")
	defer s.Close()
	require.True(t, s.Allow("k"), "the first Allow")
	st := s.keys.load("k")
	next := st.lock()
	const waiters = 16
	done := make(chan bool, waiters)
	for range waiters {
		go func() { done <- s.Allow("k") }()
	}
	q := queueOf(&st.seq)
	require.Eventually(t, func() bool { return q.waiters.Load() == waiters }, 10*time.Second, time.Millisecond,
		"the waiters park while the lock is held")
	require.Empty(t, done, "an Allow returned while another writer held the lock")
	st.unlock(next)
	admitted := 0
	for range waiters {
		select {
		case ok := <-done:
			if ok {
				admitted++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a parked waiter was not woken by the release")
		}
	}
	require.Equal(t, 2, admitted, "admitted once the lock is released")
	_, _, size := unpackPos(st.pos.Load())
	require.Equal(t, 3, size, "entries in the log")
	require.Zero(t, st.seq.Load()&1, "seq after the writers: odd")
	require.Zero(t, q.waiters.Load(), "waiters left parked")
}
