package quota_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// BenchmarkDecideApart measures Decide and Finish over 1024 distinct keys
// of tiers decided apart (see takeApart), every limiter in memory: a
// concurrency policy beside a rate policy, and a policy charged by outcome
// beside one, each admitting every request.
func BenchmarkDecideApart(b *testing.B) {
	plenty := func(name string) quota.Policy {
		return quota.Bucket(name, keylimit.Per(1<<30, time.Hour))
	}
	charged := plenty("charged")
	charged.Charge = func(o quota.Outcome) int { return o.Cost }
	for _, c := range []struct {
		name     string
		policies []quota.Policy
	}{
		{"concurrency+rate", []quota.Policy{quota.Concurrent("inflight", 1000), plenty("hour")}},
		{"charged+rate", []quota.Policy{charged, plenty("hour")}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, err := quota.New(quota.Config{Policies: c.policies})
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1024)
			ctx := context.Background()
			for i := range keys {
				keys[i] = "user-" + strconv.Itoa(i)
				v, _ := d.Decide(ctx, keys[i], "", 1)
				v.FinishWith(quota.Outcome{Status: 200, Reported: -1})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				v, _ := d.Decide(ctx, keys[i%len(keys)], "", 1)
				if v.Action() != quota.Proceed {
					b.Fatal("not admitted")
				}
				v.FinishWith(quota.Outcome{Status: 200, Reported: -1})
			}
		})
	}
}
