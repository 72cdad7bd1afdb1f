package keylimit_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/internal/hotpath"
)

// The hot path beside the floor, through the one harness (internal/hotpath,
// which says how a row is run); the benchmarks module runs the same rows
// with other Go rate limiters beside these:
//
//	go test -run '^$' -bench '^BenchmarkAllow' -cpu 1,2 .
//
// Names read as a table, BenchmarkAllow/<limiter>/keys=<n>/<serial|parallel>:
// BenchmarkAllow under a limit that admits nearly every call,
// BenchmarkAllowRefused under one that refuses every call measured, for an
// hour; BenchmarkAllowRefusedRefilling under one that refuses nearly every
// call but refills, 10 a second.

// benchLimiters are the limiters the hot-path benchmarks run: the floor,
// then keylimit's four types, each called through hotpath.Allower.
var benchLimiters = []struct {
	name string
	new  func(hotpath.Limit) (hotpath.Allower, error)
}{
	{"floor", func(hotpath.Limit) (hotpath.Allower, error) { return hotpath.NewFloor(), nil }},
	{"keylimit-bucket", benchNew(keylimit.NewTokenBucket[string])},
	{"keylimit-fixedwindow", benchNew(keylimit.NewFixedWindow[string])},
	{"keylimit-slidingwindow", benchNew(keylimit.NewSlidingWindow[string])},
	{"keylimit-slidingcounter", benchNew(keylimit.NewSlidingCounter[string])},
	// A FixedWindow of calendar days in a zone with DST: the window's
	// bounds come from the grid's cache of the current period.
	{"keylimit-fixedwindow-daily", func(l hotpath.Limit) (hotpath.Allower, error) {
		loc, err := time.LoadLocation("Europe/Bucharest")
		if err != nil {
			return nil, err
		}
		return keylimit.NewFixedWindow[string](keylimit.PerCalendar(l.Events, keylimit.Daily, loc))
	}},
	// The bucket counting its decisions for Stats: what WithStats costs.
	{"keylimit-bucket-stats", func(l hotpath.Limit) (hotpath.Allower, error) {
		return keylimit.NewTokenBucket[string](keylimit.Per(l.Events, l.Period), keylimit.WithStats())
	}},
	// The bucket in a Penalty: what the ban's lookup costs a call. Under
	// the tight limit every key is soon banned, and the row measures a ban.
	{"keylimit-bucket-penalty", func(l hotpath.Limit) (hotpath.Allower, error) {
		b, err := keylimit.NewTokenBucket[string](keylimit.Per(l.Events, l.Period))
		if err != nil {
			return nil, err
		}
		return keylimit.NewPenalty[string](b, keylimit.Ban{Refusals: 3, Within: time.Minute, For: time.Hour})
	}},
}

// benchNew adapts a keylimit constructor to the harness: Events per Period.
func benchNew[L hotpath.Allower](ctor func(keylimit.Limit, ...keylimit.Option) (L, error)) func(hotpath.Limit) (hotpath.Allower, error) {
	return func(l hotpath.Limit) (hotpath.Allower, error) {
		return ctor(keylimit.Per(l.Events, l.Period))
	}
}

func BenchmarkAllow(b *testing.B) {
	for _, bl := range benchLimiters {
		hotpath.Run(b, bl.name, hotpath.Loose, bl.new)
	}
}

func BenchmarkAllowRefused(b *testing.B) {
	for _, bl := range benchLimiters {
		hotpath.Run(b, bl.name, hotpath.Tight, bl.new)
	}
}

// BenchmarkAllowRefusedRefilling is the floor and keylimit's four types
// refusing keys that are at most 100 ms from their next event: what a
// refusal costs when time still matters to it.
func BenchmarkAllowRefusedRefilling(b *testing.B) {
	for _, bl := range benchLimiters[:5] {
		hotpath.Run(b, bl.name, hotpath.Refilling, bl.new)
	}
}

// BenchmarkAdmit is BenchmarkAllow's rows for Admit: what an Admission
// handed to a caller costs beside a bare Allow, its once included (All asks
// each limiter but the last for one without it).
func BenchmarkAdmit(b *testing.B) {
	for _, bl := range benchLimiters[1:5] {
		hotpath.Run(b, bl.name, hotpath.Loose, viewed(bl.new, func(r keylimit.Refunder[string]) hotpath.Allower { return admitter{r} }))
	}
}

// BenchmarkAdmitRefund is BenchmarkAdmit's rows for an Admit followed by the
// Refund of its Admission: what a charge-by-outcome policy (quota's
// Policy.Charge) pays for a request it does not charge.
func BenchmarkAdmitRefund(b *testing.B) {
	for _, bl := range benchLimiters[1:5] {
		hotpath.Run(b, bl.name, hotpath.Loose, viewed(bl.new, func(r keylimit.Refunder[string]) hotpath.Allower { return admitRefunder{admitter{r}} }))
	}
}

// BenchmarkPeek is BenchmarkAllow's rows for Peek, which records nothing.
func BenchmarkPeek(b *testing.B) {
	for _, bl := range benchLimiters[1:5] {
		hotpath.Run(b, bl.name, hotpath.Loose, viewed(bl.new, func(r keylimit.Refunder[string]) hotpath.Allower {
			return peeker{admitter{r}, r.(keylimit.Limiter[string])}
		}))
	}
}

// viewed builds the limiters of newL, each seen by the harness through
// view: a Refunder, called through that interface as quota and All call it.
func viewed(newL func(hotpath.Limit) (hotpath.Allower, error), view func(keylimit.Refunder[string]) hotpath.Allower) func(hotpath.Limit) (hotpath.Allower, error) {
	return func(l hotpath.Limit) (hotpath.Allower, error) {
		lim, err := newL(l)
		if err != nil {
			return nil, err
		}
		return view(lim.(keylimit.Refunder[string])), nil
	}
}

// admitter is a Refunder seen by the harness: Allow is Admit(key, 1).
type admitter struct{ keylimit.Refunder[string] }

func (a admitter) Allow(key string) bool {
	r, _ := a.Admit(key, 1)
	return r.Allowed
}

func (a admitter) Close() error { return a.Refunder.(interface{ Close() error }).Close() }

// admitRefunder's Allow is Admit(key, 1), then the Refund of its Admission.
type admitRefunder struct{ admitter }

func (a admitRefunder) Allow(key string) bool {
	r, adm := a.Admit(key, 1)
	a.Refund(key, adm)
	return r.Allowed
}

// peeker's Allow is Peek(key).Allowed, lim being the Refunder.
type peeker struct {
	admitter
	lim keylimit.Limiter[string]
}

func (p peeker) Allow(key string) bool { return p.lim.Peek(key).Allowed }

// BenchmarkWaitContended is 64 goroutines waiting on one key of a bucket of
// 20,000 a second, burst 1 (an event every 50 µs): each op is one Wait that
// returned. "queued" is
// the bucket's own WaitN (a reservation, one sleep); "polling" is the
// package's WaitN over a view of the bucket without WaitN (Take, sleep
// RetryAfter, Take again). takes/op counts polling's Take calls per
// admitted event (queued makes one reservation per wait, by construction:
// TestWaitFirstComeFirstServed holds it to one sleep); spread is the
// slowest wait over the median one.
func BenchmarkWaitContended(b *testing.B) {
	for _, mode := range []string{"queued", "polling"} {
		b.Run(mode, func(b *testing.B) {
			lim, err := keylimit.NewTokenBucket[string](keylimit.PerSecond(20_000).WithBurst(1))
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			counted := &takeCounter{lim: lim}
			wait := func(ctx context.Context) error { return lim.Wait(ctx, "k") }
			if mode == "polling" {
				wait = func(ctx context.Context) error { return keylimit.WaitN[string](ctx, counted, "k", 1) }
			}
			const waiters = 64
			waits := make([][]time.Duration, waiters)
			per := max(b.N/waiters, 1)
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range waiters {
				wg.Go(func() {
					for range per {
						start := time.Now()
						if err := wait(context.Background()); err != nil {
							panic(err)
						}
						waits[g] = append(waits[g], time.Since(start))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			var all []time.Duration
			for _, w := range waits {
				all = append(all, w...)
			}
			slices.Sort(all)
			if mode == "polling" {
				b.ReportMetric(float64(counted.n.Load())/float64(len(all)), "takes/op")
			}
			if med := all[len(all)/2]; med > 0 {
				b.ReportMetric(float64(all[len(all)-1])/float64(med), "spread")
			}
		})
	}
}

// takeCounter is a bucket seen only through Take, counting the calls.
type takeCounter struct {
	lim *keylimit.TokenBucket[string]
	n   atomic.Int64
}

func (c *takeCounter) Take(key string, n int) keylimit.Result {
	c.n.Add(1)
	return c.lim.Take(key, n)
}

// remoteView is a bucket whose Stats say Remote, as a redislimit one's do,
// so that All asks it after the in-process limiters.
type remoteView struct{ *keylimit.TokenBucket[string] }

func (remoteView) Stats() keylimit.Stats { return keylimit.Stats{Remote: true} }

// BenchmarkAllOrder is All of two buckets over 1024 keys, serial: both in
// process (the order given), a "remote" one given first and both admitting
// (asked second, the Result folded in the order given), and the in-process
// one refusing (the remote one not asked, where it was once taken from and
// refunded).
func BenchmarkAllOrder(b *testing.B) {
	bucket := func(l keylimit.Limit) *keylimit.TokenBucket[string] {
		t, err := keylimit.NewTokenBucket[string](l)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { t.Close() })
		return t
	}
	loose, tight := keylimit.PerSecond(1_000_000_000), keylimit.PerHour(1)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	for _, row := range []struct {
		name string
		lim  keylimit.Limiter[string]
	}{
		{"local,local/admitted", keylimit.All[string](bucket(loose), bucket(loose))},
		{"remote,local/admitted", keylimit.All[string](remoteView{bucket(loose)}, bucket(loose))},
		{"remote,local/refused", keylimit.All[string](remoteView{bucket(loose)}, bucket(tight))},
	} {
		b.Run(row.name, func(b *testing.B) {
			for _, k := range keys {
				row.lim.Allow(k)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				row.lim.Allow(keys[i%len(keys)])
				i++
			}
		})
	}
}
