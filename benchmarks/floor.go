package benchmarks

import (
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
)

// floor is the least a keyed limiter can do per call, and the yardstick of
// every row: read the monotonic clock, find the key's word in an xsync map
// (the map keylimit's store is built on), and CAS it. It limits nothing. A
// contender's ns/op divided by the floor's, on the same row of the same run,
// is a ratio that does not depend on the machine.
type floor struct {
	m     *xsync.MapOf[string, *atomic.Int64]
	start time.Time // carries a monotonic reading, as keylimit's clock does
}

var floorContender = Contender{
	Name: "floor",
	Kind: Floor,
	Doc:  "not a limiter: `time.Since`, `xsync.MapOf[string, *atomic.Int64]` Load, one CAS",
	New: func(Quota) (Limiter, error) {
		return &floor{m: xsync.NewMapOf[string, *atomic.Int64](), start: time.Now()}, nil
	},
}

// Allow stores the time in key's word. It creates the word for a new key,
// so that the floor is built (and measured for memory) like every limiter.
func (f *floor) Allow(key string) bool {
	now := int64(time.Since(f.start))
	w, ok := f.m.Load(key)
	if !ok {
		w, _ = f.m.LoadOrStore(key, new(atomic.Int64))
	}
	old := w.Load()
	return w.CompareAndSwap(old, now)
}
