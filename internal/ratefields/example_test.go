package ratefields_test

import (
	"fmt"

	"github.com/keylimit/keylimit/internal/ratefields"
)

// A client reads a RateLimit field as the draft asks. Here "minute" is
// used up for 42 seconds more, "hour" has quota left, and "day" says no
// number of remaining quota: it counts for nothing. A field that is not a
// valid list (a trailing comma) says nothing at all, not even its valid
// members.
func ExampleReadRateLimit() {
	exhausted, any := ratefields.ReadRateLimit(`"minute";r=0;t=42, "hour";r=90;t=600, "day";r=oops`)
	fmt.Println("a used-up policy has quota again in", exhausted, "s; every policy is whole in", any, "s")
	exhausted, any = ratefields.ReadRateLimit(`"minute";r=0;t=42,`)
	fmt.Println("malformed:", exhausted, any)
	// Output:
	// a used-up policy has quota again in 42 s; every policy is whole in 600 s
	// malformed: -1 -1
}
