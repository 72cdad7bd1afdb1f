package quota_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/keylimit/keylimit"
	"github.com/keylimit/keylimit/quota"
)

// BenchmarkDecide measures Decide over 1024 distinct keys, all created
// before the timer: one policy, two, two refusing every request (a
// refusal's fields and Retry-After), and one without the fields of an
// admission (Config.FieldsOnRefusal).
func BenchmarkDecide(b *testing.B) {
	plenty := func(name string) quota.Policy {
		return quota.Bucket(name, keylimit.Per(1<<30, time.Hour))
	}
	scarce := func(name string) quota.Policy {
		return quota.Bucket(name, keylimit.PerHour(1))
	}
	for _, c := range []struct {
		name   string
		config quota.Config
	}{
		{"one-policy", quota.Config{Policies: []quota.Policy{plenty("second")}}},
		{"two-policies", quota.Config{Policies: []quota.Policy{plenty("second"), plenty("hour")}}},
		{"two-policies/refused", quota.Config{Policies: []quota.Policy{plenty("second"), scarce("hour")}}},
		{"fields-on-refusal", quota.Config{Policies: []quota.Policy{plenty("second")}, FieldsOnRefusal: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			d, err := quota.New(c.config)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "user-" + strconv.Itoa(i)
				d.Decide(context.Background(), keys[i], "", 1)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				v, _ := d.Decide(ctx, keys[i%len(keys)], "", 1)
				if v.Decision.Cost != 1 {
					b.Fatal("not decided")
				}
			}
		})
	}
}
