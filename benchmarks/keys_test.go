package benchmarks

import "testing"

func TestKeysAreDistinctSixteenBytes(t *testing.T) {
	n := MaxKeys
	if testing.Short() {
		n = 10_000
	}
	keys := Keys(n)
	seen := make(map[string]bool, n)
	for _, k := range keys {
		if len(k) != KeyLen {
			t.Fatalf("key %q is %d bytes, want %d", k, len(k), KeyLen)
		}
		if seen[k] {
			t.Fatalf("key %q twice", k)
		}
		seen[k] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct keys, want %d", len(seen), n)
	}
}

func TestKeysAreShuffledTheSameWayEachTime(t *testing.T) {
	a, b := Keys(1000), Keys(1000)
	inOrder := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("Keys(1000)[%d] = %q then %q", i, a[i], b[i])
		}
		if a[i] == Key(i) {
			inOrder++
		}
	}
	if inOrder > 10 {
		t.Errorf("%d of 1000 keys in insertion order: not shuffled", inOrder)
	}
}

func TestKeyIsSixteenHexDigitsOfAProduct(t *testing.T) {
	// 1 × 0x9E3779B97F4A7C15
	if got, want := Key(1), "9e3779b97f4a7c15"; got != want {
		t.Errorf("Key(1) = %q, want %q", got, want)
	}
	if got, want := Key(0), "0000000000000000"; got != want {
		t.Errorf("Key(0) = %q, want %q", got, want)
	}
}
