package hotpath

import (
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// Floor is the least a keyed limiter can do per call, and the yardstick of
// every row: read the monotonic clock, find the key's word in an xsync map
// (the map keylimit's store is built on), and CAS it. It limits nothing. A
// limiter's ns/op over the floor's, on the same row of the same run, is a
// ratio that depends far less on the machine than either figure.
type Floor struct {
	m     *xsync.MapOf[string, *atomic.Int64]
	start time.Time // carries a monotonic reading, as keylimit's clock does
}

// NewFloor returns an empty Floor.
func NewFloor() *Floor {
	return &Floor{m: xsync.NewMapOf[string, *atomic.Int64](), start: time.Now()}
}

// Allow stores the time in key's word, and reports whether its CAS won. It
// creates the word for a new key, so that the floor is built (and measured
// for memory) like every limiter.
func (f *Floor) Allow(key string) bool {
	now := int64(time.Since(f.start))
	w, ok := f.m.Load(key)
	if !ok {
		w, _ = f.m.LoadOrStore(key, new(atomic.Int64))
	}
	old := w.Load()
	return w.CompareAndSwap(old, now)
}
