package benchmarks

import (
	"sync"

	"github.com/juju/ratelimit"
	"golang.org/x/time/rate"
)

// x/time/rate and juju/ratelimit limit one stream of events; users make them
// per-key by keeping one limiter per key in a map (and so do the semaphores
// of semaphore.go). These are the two ways
// that is usually written: a sync.Map, or a map behind a sync.RWMutex. Both
// look up without an exclusive lock and create on a miss without ever
// creating two limiters for one key. Neither ever forgets a key: eviction is
// left to the user, who has to write it.

// syncMapPerKey keeps one L per key in a sync.Map.
type syncMapPerKey[L any] struct {
	m     sync.Map // string -> L
	newL  func() L
	allow func(L) bool
}

func (p *syncMapPerKey[L]) Allow(key string) bool { return p.allow(p.get(key)) }

// get returns key's L, made on a miss.
func (p *syncMapPerKey[L]) get(key string) L {
	v, ok := p.m.Load(key)
	if !ok {
		v, _ = p.m.LoadOrStore(key, p.newL())
	}
	return v.(L)
}

// rwMapPerKey keeps one L per key in a map behind an RWMutex.
type rwMapPerKey[L any] struct {
	mu    sync.RWMutex // protects m
	m     map[string]L
	newL  func() L
	allow func(L) bool
}

func (p *rwMapPerKey[L]) Allow(key string) bool { return p.allow(p.get(key)) }

// get returns key's L, made on a miss.
func (p *rwMapPerKey[L]) get(key string) L {
	p.mu.RLock()
	l, ok := p.m[key]
	p.mu.RUnlock()
	if !ok {
		p.mu.Lock()
		if l, ok = p.m[key]; !ok {
			l = p.newL()
			p.m[key] = l
		}
		p.mu.Unlock()
	}
	return l
}

// perKeyContenders returns the sync.Map and the RWMutex contender of one
// single-stream limiter: newL builds it for a quota, allow asks it.
func perKeyContenders[L any](prefix string, newL func(q Quota) L, allow func(L) bool) (syncMap, rwMutex Contender) {
	syncMap = Contender{
		Name: prefix + "-syncmap",
		Kind: Peer,
		New: func(q Quota) (Limiter, error) {
			return &syncMapPerKey[L]{newL: func() L { return newL(q) }, allow: allow}, nil
		},
	}
	rwMutex = Contender{
		Name: prefix + "-rwmutex",
		Kind: Peer,
		New: func(q Quota) (Limiter, error) {
			return &rwMapPerKey[L]{m: make(map[string]L), newL: func() L { return newL(q) }, allow: allow}, nil
		},
	}
	return syncMap, rwMutex
}

// perSecond is q's refill rate in events per second.
func (q Quota) perSecond() float64 { return float64(q.Burst) / q.Period.Seconds() }

// xtime is one golang.org/x/time/rate Limiter per key.
var xtimeSyncMap, xtimeRWMutex = perKeyContenders("xtime",
	func(q Quota) *rate.Limiter { return rate.NewLimiter(rate.Limit(q.perSecond()), q.Burst) },
	(*rate.Limiter).Allow)

// juju is one github.com/juju/ratelimit Bucket per key, asked with
// TakeAvailable(1).
var jujuSyncMap, jujuRWMutex = perKeyContenders("juju",
	func(q Quota) *ratelimit.Bucket { return ratelimit.NewBucketWithRate(q.perSecond(), int64(q.Burst)) },
	func(b *ratelimit.Bucket) bool { return b.TakeAvailable(1) == 1 })
