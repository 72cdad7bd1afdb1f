package keylimit_test

import (
	"context"
	"fmt"

	"github.com/keylimit/keylimit"
)

// The zero value of Criticality is Default, what a context without one
// carries.
func ExampleCriticalityOf() {
	fmt.Println(keylimit.CriticalityOf(context.Background()) == keylimit.Default)
	// Output: true
}
