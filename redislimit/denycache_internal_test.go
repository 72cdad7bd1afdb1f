package redislimit

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/stretchr/testify/require"
)

// newDenyCache returns a deny cache of at most max keys.
func newDenyCache(max int) *denyCache {
	var c counts
	c.init()
	d := new(denyCache)
	d.init(max, &c, nil)
	return d
}

// refusal is a refusal of one event for an hour.
var refusal = keylimit.Result{Limit: 1, RetryAfter: time.Hour, ResetAfter: time.Hour}

// heapInUse returns the bytes of live heap objects, after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestDenyCacheHoldsNoKeys pins issue 13.6: the deny cache kept whole key
// strings, so 3,000 refused 64 KB keys held 222 MB. It keeps a fixed-size
// entry a key: after 3,000 such keys, all remembered, the heap holds less
// than twice denialBytes a key more than before.
func TestDenyCacheHoldsNoKeys(t *testing.T) {
	const keys, keyLen = 3000, 64 << 10
	d := newDenyCache(DefaultDenyCacheSize)
	big := strings.Repeat("k", keyLen)
	key := func(i int) string { return big + strconv.Itoa(i) }
	before := heapInUse()
	for i := range keys {
		d.record(key(i), 1, refusal, 0, 0)
	}
	// Measured again for up to 5 s: what other goroutines hold at one
	// instant is not the cache's, and is gone at the next; 192 MB of keys
	// kept would stay.
	bound := int64(keys * 2 * denialBytes)
	held := int64(heapInUse()) - int64(before)
	for deadline := time.Now().Add(5 * time.Second); held >= bound && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		held = int64(heapInUse()) - int64(before)
	}
	require.Less(t, held, bound, "bytes held by %d refused keys of %d bytes", keys, keyLen)
	require.Equal(t, keys, d.len(), "keys remembered")
	for i := range keys {
		r, ok := d.check(key(i), 1, 0)
		require.True(t, ok, "key %d remembered", i)
		require.Equal(t, refusal, r, "key %d's refusal", i)
	}
	_, ok := d.check(big, 1, 0)
	require.False(t, ok, "a key never refused, a prefix of those refused")
}

// TestDenyCacheKeepsTheNewest: a full cache forgets its oldest record for
// each new one, so it holds at most max keys, the newest; a key recorded
// again is as new as its latest record, and its earlier one, when its turn
// comes, forgets nothing.
func TestDenyCacheKeepsTheNewest(t *testing.T) {
	const max = 100
	d := newDenyCache(max)
	remembered := func(i int) bool {
		_, ok := d.check("k"+strconv.Itoa(i), 1, 0)
		return ok
	}
	for i := range 3 * max {
		d.record("k"+strconv.Itoa(i), 1, refusal, 0, 0)
		require.LessOrEqual(t, d.len(), max, "keys after %d records", i+1)
	}
	for i := range 3 * max {
		require.Equal(t, i >= 2*max, remembered(i), "key %d of %d, in a cache of %d", i, 3*max, max)
	}
	// k200 (the oldest) is recorded again; then 99 more keys, whose records
	// push out k201..k299 and k200's first record, but not its second.
	d.record("k200", 1, refusal, 0, 0)
	for i := 1000; i < 1000+max-1; i++ {
		d.record("k"+strconv.Itoa(i), 1, refusal, 0, 0)
	}
	require.True(t, remembered(200), "k200, recorded again")
	require.False(t, remembered(201), "k201")
	require.Equal(t, max, d.len(), "keys")
	require.Len(t, d.order, max, "slots in the ring")

	d.forget("k200")
	require.False(t, remembered(200), "k200 after forget")
}

// TestDenyCacheSecondHash: an entry whose first hash matches but whose
// second does not is another key's, and answers nothing.
func TestDenyCacheSecondHash(t *testing.T) {
	d := newDenyCache(10)
	d.record("a", 1, refusal, 0, 0)
	e, ok := d.m.Load(d.hash("a"))
	require.True(t, ok)
	d.m.Store(d.hash("b"), e) // as if b's first hash were a's
	_, ok = d.check("b", 1, 0)
	require.False(t, ok, "b, under a's entry")
	_, ok = d.check("a", 1, 0)
	require.True(t, ok, "a")
}

// Issue 37.6: a refusal whose round trip met a Refund or Reset of its key
// on this instance (a forget, before the call or after it) is not
// recorded, else it would refuse the key, freed, until its RetryAfter had
// passed; one that met none is, and a forget after it drops it. A forget
// of a key of another stripe keeps nothing from being recorded.
func TestDenyCacheSkipsRefusalThatMetForget(t *testing.T) {
	d := newDenyCache(10)
	gen := d.gen("k")
	d.forget("k")
	d.recordEach("k", 1, refusal, 0, 0, nil, gen)
	_, ok := d.check("k", 1, 0)
	require.False(t, ok, "a refusal that met a forget")

	d.recordEach("k", 1, refusal, 0, 0, nil, d.gen("k"))
	_, ok = d.check("k", 1, 0)
	require.True(t, ok, "a refusal that met none")
	d.forget("k")
	_, ok = d.check("k", 1, 0)
	require.False(t, ok, "dropped by the forget after")

	other := "k0"
	for i := 0; d.hash(other)%denyStripes == d.hash("k")%denyStripes; i++ {
		other = "k" + strconv.Itoa(i)
	}
	gen = d.gen("k")
	d.forget(other)
	d.recordEach("k", 1, refusal, 0, 0, nil, gen)
	_, ok = d.check("k", 1, 0)
	require.True(t, ok, "a forget of another stripe")
}
