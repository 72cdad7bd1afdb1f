package redislimit_test

import (
	"testing"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/redislimit"
)

// FuzzConcurrency drives two instances of a Concurrency on the shared
// Redis with a program of bytes (acquire n of a key on an instance,
// release an acquisition, again or for the first time, peek, change the
// limit) and checks each answer against a model: a counter per key, and
// each acquisition's slots, given back once. Three bytes an operation:
// what, which instance or acquisition, n and the key.
func FuzzConcurrency(f *testing.F) {
	f.Add([]byte{0, 0, 0x12, 0, 1, 0x13, 1, 0, 0, 0, 1, 0x11})
	f.Add([]byte{0, 0, 0x30, 2, 1, 0x02, 1, 0, 0, 1, 0, 0, 0, 1, 0x31, 3, 0, 0})
	f.Add([]byte{3, 0, 1, 0, 0, 0x22, 3, 0, 5, 0, 1, 0x23, 1, 1, 0, 2, 0, 0})
	c := shared.client(f)
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 300 {
			prog = prog[:300]
		}
		limit := 3
		prefix := testKey(t, "fuzz") + ":"
		var fleet [2]*redislimit.Concurrency
		for i := range fleet {
			lim, err := redislimit.NewConcurrency(c, "test", limit, redislimit.WithPrefix(prefix), redislimit.WithTimeout(patient),
				redislimit.WithFailurePolicy(redislimit.FailClosed()))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			fleet[i] = lim
		}
		keys := [2]string{"a", "}b"}
		held := map[string]int{}
		type acq struct {
			p    keylimit.Permit
			key  string
			n    int
			done bool
		}
		var acqs []*acq
		for i := 0; i+2 < len(prog); i += 3 {
			op, who, arg := prog[i]%4, int(prog[i+1]), prog[i+2]
			lim := fleet[who%2]
			n, key := int(arg&0xf)%5, keys[arg>>4%2]
			switch op {
			case 0: // TryAcquire n of key
				p, r := lim.TryAcquire(key, n)
				fits := n >= 0 && n <= limit && held[key]+n <= limit
				if n == 0 {
					fits = true
				}
				if r.Allowed != fits {
					t.Fatalf("op %d: TryAcquire(%q, %d) with %d of %d held: Allowed %v", i/3, key, n, held[key], limit, r.Allowed)
				}
				if n > limit {
					if r.RetryAfter != keylimit.InfDuration {
						t.Fatalf("op %d: TryAcquire(%q, %d) above the limit %d: RetryAfter %v", i/3, key, n, limit, r.RetryAfter)
					}
					continue
				}
				if want := max(limit-held[key]-n*boolInt(fits), 0); r.Remaining != want {
					t.Fatalf("op %d: TryAcquire(%q, %d): Remaining %d, want %d", i/3, key, n, r.Remaining, want)
				}
				if fits && n > 0 {
					held[key] += n
					acqs = append(acqs, &acq{p: p, key: key, n: n})
				}
			case 1: // release an acquisition (again, perhaps)
				if len(acqs) == 0 {
					continue
				}
				a := acqs[who%len(acqs)]
				a.p.Release()
				if !a.done {
					a.done = true
					held[a.key] -= a.n
				}
			case 2: // Peek
				r := lim.Peek(key)
				if want := max(limit-held[key], 0); r.Remaining != want || r.Allowed != (held[key] < limit) {
					t.Fatalf("op %d: Peek(%q) with %d of %d held = %+v", i/3, key, held[key], limit, r)
				}
			case 3: // SetLimit on both instances
				limit = 1 + int(arg)%5
				for _, l := range fleet {
					if err := l.SetLimit(limit); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for _, a := range acqs {
			a.p.Release()
		}
		for _, key := range keys {
			if r := fleet[0].Peek(key); r.Remaining != limit {
				t.Fatalf("Peek(%q) once all are released = %+v, want Remaining %d", key, r, limit)
			}
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
