package httplimit

import (
	"math/rand/v2"
	"sync"
	"time"
)

// defaultMaxPaused is the most keys a Transport keeps paused at once when
// Transport.MaxPaused is 0.
const defaultMaxPaused = 1 << 16

// sweepAbove is the number of pauses above which adding one deletes those
// that have ended.
const sweepAbove = 64

// pauses are the server's pauses a Transport keeps: the end of each, by key,
// for at most a cap of keys. Upkeep is O(1) amortised per pause added: a
// sweep visits every entry, and comes only after as many pauses were added
// as it may visit (see add).
type pauses struct {
	mu sync.Mutex // protects everything below
	// ends maps a key to the end of the server's pause on it. A pause only
	// ever grows later; one that has ended is deleted when next read, or by
	// a sweep.
	ends map[string]time.Time
	// sweepAt is twice the pauses the last sweep kept: the next sweep comes
	// when there are more than that, or than sweepAbove if that is more,
	// or than the cap if that is less.
	sweepAt int
	// dropped counts the pauses deleted before their end because the cap
	// was reached.
	dropped uint64
	// visited counts the entries sweeps have looked at, so that a test can
	// hold the upkeep to its bound.
	visited uint64
}

// add records that the server asked for nothing under key until until (the
// answer came at now), keeping at most limit (at least 1) pauses. An
// answer that arrived late does not shorten a pause.
//
// Past limit, the sweep first deletes the pauses that have ended; if more
// than limit are still running, it drops those that end first (the new one
// included), down to limit less an eighth, counting them in dropped: they
// lose least by being forgotten. The next sweep then comes an eighth of
// limit later, so each added pause pays for a bounded number of entries
// visited. It returns how many pauses it dropped.
func (p *pauses) add(key string, until, now time.Time, limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.ends[key]; ok {
		if until.After(cur) {
			p.ends[key] = until
		}
		return 0
	}
	if p.ends == nil {
		p.ends = make(map[string]time.Time)
	}
	p.ends[key] = until
	dropped := p.dropped
	if len(p.ends) > min(max(p.sweepAt, sweepAbove), limit) {
		p.sweep(now, limit)
	}
	return int(p.dropped - dropped)
}

// sweep deletes the pauses that have ended at now and, if more than limit
// remain, the earliest-ending down to limit less an eighth; it sets when the
// next sweep comes. The caller holds mu.
func (p *pauses) sweep(now time.Time, limit int) {
	p.visited += uint64(len(p.ends))
	for k, u := range p.ends {
		if !u.After(now) {
			delete(p.ends, k)
		}
	}
	if n := len(p.ends); n > limit {
		p.drop(n - (limit - limit/8))
	}
	p.sweepAt = 2 * len(p.ends)
}

// drop deletes the n pauses that end first. The caller holds mu.
func (p *pauses) drop(n int) {
	if n <= 0 {
		return
	}
	p.visited += 3 * uint64(len(p.ends)) // the copy and the two passes below
	ends := make([]time.Time, 0, len(p.ends))
	for _, u := range p.ends {
		ends = append(ends, u)
	}
	cut := nth(ends, n-1) // pauses ending before cut go, then as many ending at it as n allows
	left := n
	for k, u := range p.ends {
		if u.Before(cut) {
			delete(p.ends, k)
			left--
		}
	}
	for k, u := range p.ends {
		if left == 0 {
			break
		}
		if u.Equal(cut) {
			delete(p.ends, k)
			left--
		}
	}
	p.dropped += uint64(n)
}

// until returns the end of the pause on key, or the zero Time if there is
// none at now.
func (p *pauses) until(key string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.ends[key]
	if ok && !until.After(now) {
		delete(p.ends, key)
		return time.Time{}
	}
	return until
}

// nth returns the k-th smallest of a (from 0), reordering a: a quickselect
// on random pivots, with a three-way partition, so that its expected time is
// linear whatever the times a server sent (all equal included).
func nth(a []time.Time, k int) time.Time {
	lo, hi := 0, len(a)-1
	for lo < hi {
		pivot := a[lo+rand.IntN(hi-lo+1)]
		lt, i, gt := lo, lo, hi // a[lo:lt] < pivot, a[lt:i] == pivot, a[gt+1:hi+1] > pivot
		for i <= gt {
			switch c := a[i].Compare(pivot); {
			case c < 0:
				a[lt], a[i] = a[i], a[lt]
				lt++
				i++
			case c > 0:
				a[i], a[gt] = a[gt], a[i]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return pivot
		}
	}
	return a[k]
}
