package keylimit

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOncesHandOutDistinctSlots: 64 goroutines take 500 slots each, all for
// keys of one stripe, so that blocks fill and are replaced while others
// take from them: no (block, slot) is handed out twice, every slot records
// its n, and a block holds at most 64 admissions. Two admissions sharing a
// slot would share a once: the Refund of one would stop the other's.
func TestOncesHandOutDistinctSlots(t *testing.T) {
	var o onces
	o.init()
	const goroutines, each = 64, 500
	type slot struct {
		b   *onceBlock
		bit uint64
	}
	got := make([][]slot, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				n := 1 + (g+i)%7
				b, s := o.take(uint64(g)*(o.mask+1), n) // every g in stripe 0
				if int(s>>6) != n {
					panic("the slot does not record n")
				}
				got[g] = append(got[g], slot{b, s & 63})
			}
		})
	}
	wg.Wait()
	seen := map[slot]bool{}
	blocks := map[*onceBlock]int{}
	for _, ss := range got {
		for _, s := range ss {
			require.False(t, seen[s], "a slot handed out twice")
			seen[s] = true
			blocks[s.b]++
		}
	}
	require.Len(t, seen, goroutines*each)
	for _, k := range blocks {
		require.LessOrEqual(t, k, 64)
	}
	require.GreaterOrEqual(t, len(blocks), goroutines*each/64)
}

// TestClaimOncePerSlot: the admissions of one block are claimed
// independently, each once, whatever the order, and a claim gives back at
// most the n its slot recorded.
func TestClaimOncePerSlot(t *testing.T) {
	var o onces
	o.init()
	adms := make([]Admission, 64)
	for i := range adms {
		adms[i].N = 3
		adms[i].once, adms[i].slot = o.take(0, 3)
	}
	require.Same(t, adms[0].once, adms[63].once, "64 admissions, one block")
	for i := len(adms) - 1; i >= 0; i -= 2 {
		raised := adms[i]
		raised.N = 9
		n, ok := raised.claim()
		require.True(t, ok)
		require.Equal(t, 3, n, "a raised N gives back what was taken")
		_, ok = adms[i].claim()
		require.False(t, ok, "a copy's second claim")
	}
	for i := 0; i < len(adms); i += 2 {
		part := adms[i]
		part.N = 1
		n, ok := part.claim()
		require.True(t, ok, "admission %d, untouched by its neighbours' claims", i)
		require.Equal(t, 1, n)
		_, ok = adms[i].claim()
		require.False(t, ok)
	}
}
