package hotpath

import (
	"math/rand/v2"
	"sync"
)

// KeyLen is the length of every key: 16 bytes, the size of an API key's
// prefix, a UUID's bytes or an IPv6 address.
const KeyLen = 16

// MaxKeys is the most keys Keys returns, and the largest row.
const MaxKeys = 1_000_000

// Key returns the i-th key: i times an odd constant, in 16 hex digits, so
// that distinct i (below 2^64) give distinct keys that share no prefix
// pattern a hash could favour. It allocates the key's 16 bytes.
func Key(i int) string {
	const digits = "0123456789abcdef"
	var b [KeyLen]byte
	v := uint64(i) * 0x9E3779B97F4A7C15
	for j := KeyLen - 1; j >= 0; j-- {
		b[j] = digits[v&15]
		v >>= 4
	}
	return string(b[:])
}

var (
	madeMu sync.Mutex // protects made
	made   []string   // keys 0 to len(made)-1, made once and shared
)

// Keys returns keys 0 to n-1 (n <= MaxKeys) in a shuffled order, the same
// order on every call, so that a walk through them touches memory the way
// traffic from many clients does, not in insertion order. The strings are
// shared with other callers' slices; the slice is the caller's.
func Keys(n int) []string {
	madeMu.Lock()
	for i := len(made); i < n; i++ {
		made = append(made, Key(i))
	}
	keys := append([]string(nil), made[:n]...)
	madeMu.Unlock()
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}
