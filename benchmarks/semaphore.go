package benchmarks

import (
	"context"
	"io"

	"github.com/keylimit/keylimit"
	"golang.org/x/sync/semaphore"
)

// Semaphore is a concurrency limit per key, as the concurrency benchmarks
// call it: take one of key's slots, waiting under ctx while none is free,
// call hold (if not nil) while holding it, and give it back. Every keyed
// semaphore is called through it, so that all pay the same dispatch.
type Semaphore interface {
	AcquireRelease(ctx context.Context, key string, hold func()) error
}

// SemaphoreContender is one keyed semaphore under test.
type SemaphoreContender struct {
	Name string
	// New builds a semaphore of n slots per key. Close it when done.
	New func(n int) (Semaphore, error)
}

// SemaphoreContenders returns keylimit's Concurrency, then what a Go
// program uses for a concurrency limit per key without it: one
// golang.org/x/sync/semaphore.Weighted per key, in a sync.Map or in a map
// under a sync.RWMutex, and a buffered channel per key in a sync.Map. The
// peers keep every key they have seen; a Concurrency forgets the idle ones.
func SemaphoreContenders() []SemaphoreContender {
	return []SemaphoreContender{
		{"keylimit-concurrency", func(n int) (Semaphore, error) {
			c, err := keylimit.NewConcurrency[string](n)
			if err != nil {
				return nil, err
			}
			return concurrencySemaphore{c}, nil
		}},
		{"weighted-syncmap", func(n int) (Semaphore, error) {
			return &weightedSyncMap{syncMapPerKey[*semaphore.Weighted]{newL: weighted(n)}}, nil
		}},
		{"weighted-rwmutex", func(n int) (Semaphore, error) {
			return &weightedRWMutex{rwMapPerKey[*semaphore.Weighted]{m: map[string]*semaphore.Weighted{}, newL: weighted(n)}}, nil
		}},
		{"chan-syncmap", func(n int) (Semaphore, error) {
			return &chanSyncMap{syncMapPerKey[chan struct{}]{newL: func() chan struct{} { return make(chan struct{}, n) }}}, nil
		}},
	}
}

// CloseSemaphore releases s's background work, if it has any.
func CloseSemaphore(s Semaphore) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// concurrencySemaphore is keylimit's: Acquire, then the Permit's Release.
type concurrencySemaphore struct{ *keylimit.Concurrency[string] }

func (s concurrencySemaphore) AcquireRelease(ctx context.Context, key string, hold func()) error {
	p, err := s.Acquire(ctx, key, 1)
	if err != nil {
		return err
	}
	if hold != nil {
		hold()
	}
	p.Release()
	return nil
}

// weighted returns the constructor of a semaphore.Weighted of n.
func weighted(n int) func() *semaphore.Weighted {
	return func() *semaphore.Weighted { return semaphore.NewWeighted(int64(n)) }
}

// weightedSyncMap is a semaphore.Weighted per key in a sync.Map.
type weightedSyncMap struct {
	syncMapPerKey[*semaphore.Weighted]
}

func (s *weightedSyncMap) AcquireRelease(ctx context.Context, key string, hold func()) error {
	return acquireWeighted(ctx, s.get(key), hold)
}

// weightedRWMutex is a semaphore.Weighted per key in a map under a
// sync.RWMutex.
type weightedRWMutex struct {
	rwMapPerKey[*semaphore.Weighted]
}

func (s *weightedRWMutex) AcquireRelease(ctx context.Context, key string, hold func()) error {
	return acquireWeighted(ctx, s.get(key), hold)
}

func acquireWeighted(ctx context.Context, w *semaphore.Weighted, hold func()) error {
	if err := w.Acquire(ctx, 1); err != nil {
		return err
	}
	if hold != nil {
		hold()
	}
	w.Release(1)
	return nil
}

// chanSyncMap is a buffered channel of n per key in a sync.Map: a send
// takes a slot, a receive gives it back.
type chanSyncMap struct {
	syncMapPerKey[chan struct{}]
}

func (s *chanSyncMap) AcquireRelease(ctx context.Context, key string, hold func()) error {
	ch := s.get(key)
	select {
	case ch <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if hold != nil {
		hold()
	}
	<-ch
	return nil
}
