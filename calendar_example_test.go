package keylimit_test

import (
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/keylimit/keylimit"
)

// A monthly plan that resets at midnight on the 1st in each tenant's time
// zone, the zone from SetKeyLimit's function, the plan from its text form.
func ExamplePerCalendar() {
	var plan keylimit.Limit
	if err := plan.UnmarshalText([]byte("3/month in Europe/Bucharest")); err != nil {
		panic(err)
	}
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		panic(err)
	}
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC))
	month, err := keylimit.NewFixedWindow[string](plan, keylimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	defer month.Close()
	// A tenant in Tokyo has the same plan in its own zone.
	month.SetKeyLimit(func(tenant string) keylimit.Limit {
		if tenant == "tokyo-corp" {
			return keylimit.PerCalendar(plan.Events, keylimit.Monthly, tokyo)
		}
		return keylimit.Limit{} // the window's own: Bucharest's month
	})

	for _, tenant := range []string{"bucharest-srl", "tokyo-corp"} {
		fmt.Println(tenant, month.LimitOf(tenant))
		for range 4 {
			fmt.Println(" ", month.Take(tenant, 1))
		}
	}
	// At 12:00 UTC on 31 January, Tokyo's month ends at 15:00 UTC,
	// Bucharest's at 22:00 UTC; both are February then.
	mock.Set(time.Date(2026, 1, 31, 22, 0, 0, 0, time.UTC)) // midnight in Bucharest
	fmt.Println("bucharest-srl on 1 February:", month.Take("bucharest-srl", 1))
	start, end := month.LimitOf("tokyo-corp").WindowAt(mock.Now())
	fmt.Println("tokyo-corp's month:", start.In(tokyo).Format(time.DateTime), "to", end.In(tokyo).Format(time.DateTime))
	// Output:
	// bucharest-srl 3/month in Europe/Bucharest
	//   allowed: 2 of 3 left, full in 10h0m0s
	//   allowed: 1 of 3 left, full in 10h0m0s
	//   allowed: 0 of 3 left, full in 10h0m0s
	//   refused: 0 of 3 left, retry in 10h0m0s, full in 10h0m0s
	// tokyo-corp 3/month in Asia/Tokyo
	//   allowed: 2 of 3 left, full in 3h0m0s
	//   allowed: 1 of 3 left, full in 3h0m0s
	//   allowed: 0 of 3 left, full in 3h0m0s
	//   refused: 0 of 3 left, retry in 3h0m0s, full in 3h0m0s
	// bucharest-srl on 1 February: allowed: 2 of 3 left, full in 672h0m0s
	// tokyo-corp's month: 2026-02-01 00:00:00 to 2026-03-01 00:00:00
}
